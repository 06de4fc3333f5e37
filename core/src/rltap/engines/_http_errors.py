"""How the HTTP engines' failures cross into rltap's error hierarchy: one table, one translator.

Every exception the HTTP client can raise maps through `EXCEPTION_MAP` (the pattern of httpx's
`HTTPCORE_EXC_MAP`): an exception takes the entry of its nearest class in the table, by method
resolution order, and `map_http_errors` raises that `EngineError` from it. A test walks every
aiohttp client exception and fails when one has no entry. HTTP error statuses map through
`error_for_status`:

    connect refused / DNS / connect timeout  -> EngineUnavailable (retryable)
    no byte from the engine within `timeout` -> EngineTimeout     (retryable)
    connection dropped mid-response          -> EngineError       (retryable)
    invalid HTTP, URL or JSON, a TLS failure -> EngineError       (not retryable)
    HTTP 408 / 504                           -> EngineTimeout     (retryable)
    HTTP 429 / 502 / 503                     -> EngineUnavailable (retryable)
    HTTP 500 and other 5xx                   -> EngineError       (retryable)
    HTTP 400, 404, 422 and other 4xx         -> EngineError       (not retryable, engine's message)

5xx count as retryable because a restarting or overloaded engine answers with them; a request
the engine rejects as malformed (4xx) fails the same way every time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
import orjson

from rltap.record.errors import EngineError, EngineTimeout, EngineUnavailable

__all__ = [
    "EXCEPTION_MAP",
    "ErrorMapping",
    "engine_error",
    "error_for_status",
    "map_http_errors",
    "mapping_for",
]

_MAX_ERROR_TEXT = 2000


@dataclass(frozen=True, slots=True)
class ErrorMapping:
    """The rltap error an exception becomes, and what the message says happened."""

    error: type[EngineError]
    happened: str
    retryable: bool


_UNREACHABLE = ErrorMapping(EngineUnavailable, "is unreachable", retryable=True)
_SILENT = ErrorMapping(EngineTimeout, "sent nothing within the timeout", retryable=True)
_DROPPED = ErrorMapping(EngineError, "dropped the connection", retryable=True)
_BAD_URL = ErrorMapping(EngineError, "is not a valid http(s) URL", retryable=False)

EXCEPTION_MAP: dict[type[Exception], ErrorMapping] = {
    aiohttp.ConnectionTimeoutError: ErrorMapping(
        EngineUnavailable, "did not accept a connection in time", retryable=True
    ),
    aiohttp.ClientConnectorError: _UNREACHABLE,
    aiohttp.ClientSSLError: ErrorMapping(EngineError, "failed the TLS handshake", retryable=False),
    aiohttp.ServerTimeoutError: _SILENT,
    TimeoutError: _SILENT,
    aiohttp.ServerFingerprintMismatch: ErrorMapping(
        EngineError, "presented an unexpected certificate", retryable=False
    ),
    aiohttp.ClientConnectionError: _DROPPED,
    aiohttp.ClientPayloadError: _DROPPED,
    aiohttp.UploadAbortedError: _DROPPED,
    aiohttp.ClientResponseError: ErrorMapping(
        EngineError, "answered with invalid HTTP", retryable=False
    ),
    aiohttp.RedirectClientError: ErrorMapping(
        EngineError, "redirected the request", retryable=False
    ),
    aiohttp.InvalidURL: _BAD_URL,
    aiohttp.NonHttpUrlClientError: _BAD_URL,
    orjson.JSONDecodeError: ErrorMapping(EngineError, "sent invalid JSON", retryable=False),
}


def mapping_for(exc_type: type[BaseException]) -> ErrorMapping | None:
    """The entry of `exc_type`'s nearest class in `EXCEPTION_MAP` (None: not a client error)."""
    for cls in exc_type.__mro__:
        mapping = EXCEPTION_MAP.get(cls)
        if mapping is not None:
            return mapping
    return None


def engine_error(engine: str, url: str, exc: BaseException) -> EngineError | None:
    """The `EngineError` a client exception stands for (`exc` itself if it is one; None: not
    one, such as a cancellation)."""
    if isinstance(exc, EngineError):
        return exc
    mapping = mapping_for(type(exc))
    if mapping is None:
        return None
    msg = f"{engine} at {url} {mapping.happened}: {str(exc) or type(exc).__name__}"
    return mapping.error(msg, is_retryable=mapping.retryable)


@contextlib.contextmanager
def map_http_errors(engine: str, url: str) -> Iterator[None]:
    """Translate the client exceptions raised inside into `EngineError`s."""
    try:
        yield
    except Exception as exc:
        mapped = engine_error(engine, url, exc)
        if mapped is None or mapped is exc:
            raise
        raise mapped from exc


def _engine_message(body: bytes) -> str:
    """The human message inside an engine's error body, whatever its shape."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return text[:_MAX_ERROR_TEXT] or "(empty body)"
    if isinstance(data, dict):
        # vLLM and SGLang: {"error": {"message": ...}}; older vLLM: {"object": "error",
        # "message": ...}; FastAPI validation: {"detail": ...}.
        error = data.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])[:_MAX_ERROR_TEXT]
        for key in ("message", "detail", "error"):
            if key in data:
                value = data[key]
                return (value if isinstance(value, str) else str(value))[:_MAX_ERROR_TEXT]
    return text[:_MAX_ERROR_TEXT]


def error_for_status(engine: str, status: int, body: bytes) -> EngineError:
    """The rltap error for an HTTP error `status` returned by `engine`, with its message."""
    msg = f"{engine} returned HTTP {status}: {_engine_message(body)}"
    if status in (408, 504):
        return EngineTimeout(msg)
    if status in (429, 502, 503):
        return EngineUnavailable(msg)
    return EngineError(msg, is_retryable=status >= 500)
