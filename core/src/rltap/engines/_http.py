"""What the HTTP engines (vLLM, SGLang) share: one HTTP client, error mapping, SSE reading.

Every connection, timeout and protocol failure and every HTTP error status crosses into rltap's
error hierarchy in one place, `map_http_errors` (the pattern of httpx's
`map_httpcore_exceptions`), so the engines never see a backend exception:

    connect refused / DNS / connect timeout  -> EngineUnavailable (retryable)
    no byte from the engine within `timeout` -> EngineTimeout     (retryable)
    connection dropped mid-response          -> EngineError       (retryable)
    invalid JSON or any other client error   -> EngineError       (not retryable)
    HTTP 408 / 504                           -> EngineTimeout     (retryable)
    HTTP 429 / 502 / 503                     -> EngineUnavailable (retryable)
    HTTP 500 and other 5xx                   -> EngineError       (retryable)
    HTTP 400, 404, 422 and other 4xx         -> EngineError       (not retryable, engine's message)

5xx count as retryable because a restarting or overloaded engine answers with them; a request
the engine rejects as malformed (4xx) fails the same way every time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from rltap.engines.http1 import (
    ConnectFailed,
    ConnectionDropped,
    ConnectTimeout,
    HTTP1Client,
    HTTP1Response,
    ProtocolError,
)
from rltap.errors import EngineError, EngineTimeout, EngineUnavailable
from rltap.types import LogprobConvention

__all__ = [
    "EngineHTTPClient",
    "HTTPEngineBase",
    "InflightRequests",
    "error_for_status",
    "iter_sse_data",
    "map_http_errors",
]

_JSON_HEADERS = {"Content-Type": "application/json"}
_MAX_ERROR_TEXT = 2000


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


def engine_error(engine: str, url: str, exc: Exception) -> EngineError | None:
    """The `EngineError` a connection, timeout, HTTP or JSON error stands for (None: not one)."""
    if isinstance(exc, EngineError):
        return exc
    if isinstance(exc, ConnectTimeout):
        return EngineUnavailable(f"{engine} at {url} did not accept a connection in time")
    if isinstance(exc, ConnectFailed):
        return EngineUnavailable(f"{engine} at {url} is unreachable: {exc}")
    if isinstance(exc, TimeoutError):  # the client's read timeout subclasses it
        return EngineTimeout(f"{engine} at {url} sent nothing within the timeout")
    if isinstance(exc, ConnectionDropped):
        return EngineError(f"{engine} at {url} dropped the connection: {exc}", is_retryable=True)
    if isinstance(exc, ProtocolError):
        return EngineError(f"{engine} at {url} answered with invalid HTTP: {exc}")
    if isinstance(exc, orjson.JSONDecodeError):
        return EngineError(f"{engine} at {url} sent invalid JSON: {exc}")
    return None


@contextlib.contextmanager
def map_http_errors(engine: str, url: str) -> Iterator[None]:
    """Translate connection, timeout, HTTP and JSON errors raised inside into `EngineError`s."""
    try:
        yield
    except Exception as exc:
        mapped = engine_error(engine, url, exc)
        if mapped is None or mapped is exc:
            raise
        raise mapped from exc


async def iter_sse_data(response: HTTP1Response) -> AsyncIterator[bytes]:
    """Yield the `data` payload of each server-sent event until `[DONE]` or the body ends.

    Lines are split here, with no line-length limit: a cumulative SGLang chunk (every logprob
    so far) is one long line.
    """
    buffer = bytearray()
    data: list[bytes] = []
    async for piece in response.iter_chunks():
        buffer += piece
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
            elif not line and data:
                payload = b"\n".join(data)
                data = []
                if payload == b"[DONE]":
                    return
                yield payload
        del buffer[:start]
    if data and (payload := b"\n".join(data)) != b"[DONE]":
        yield payload


class EngineHTTPClient:
    """An HTTP client to one engine server, opened lazily on the running event loop.

    `timeout` bounds how long the engine may stay silent (the gap before the head and between
    two body chunks); `connect_timeout` bounds opening a connection.

    Usage:
        client = EngineHTTPClient("http://127.0.0.1:8000", engine="vLLM")
        async with client.post("/v1/completions", body) as response:
            data = await client.read_json(response)
        await client.close()
    """

    def __init__(
        self,
        base_url: str,
        *,
        engine: str,
        api_key: str | None = None,
        timeout: float | None = 600.0,
        connect_timeout: float = 10.0,
        max_connections: int = 0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.engine = engine
        self._headers = dict(_JSON_HEADERS)
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._max_connections = max_connections
        # Built here so that a malformed URL fails at once; it binds to the first loop that uses it.
        self._http: HTTP1Client | None = self._new_http()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _new_http(self) -> HTTP1Client:
        return HTTP1Client(
            self.base_url,
            headers=self._headers,
            timeout=self._timeout,
            connect_timeout=self._connect_timeout,
            max_connections=self._max_connections,
        )

    def http(self) -> HTTP1Client:
        """The client for the running loop (a new loop, as in tests, gets a new client)."""
        loop = asyncio.get_running_loop()
        if self._http is None or (self._loop is not None and self._loop is not loop):
            self._http = self._new_http()
        self._loop = loop
        return self._http

    @contextlib.asynccontextmanager
    async def post(self, path: str, body: dict[str, Any]) -> AsyncIterator[HTTP1Response]:
        """POST `body` as JSON; yield the response once its status is known to be a success.

        Leaving the block before the body is read closes the connection, which is how vLLM and
        SGLang learn that the client went away and abort the request.
        """
        with map_http_errors(self.engine, self.base_url + path):
            response = await self.http().request("POST", path, orjson.dumps(body))
            try:
                if response.status >= 400:
                    raise error_for_status(self.engine, response.status, await response.read())
                yield response
            finally:
                if not response.at_eof:
                    response.close()

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body` as JSON and decode the JSON reply: `post` and `read_json` in one call.

        The non-streamed engine call takes this path on every proxy request, so it does without
        their context managers. Cancelled before the reply is read, it closes the connection.
        """
        try:
            response = await self.http().request("POST", path, orjson.dumps(body))
            try:
                payload = await response.read()
            finally:
                if not response.at_eof:
                    response.close()
            if response.status >= 400:
                raise error_for_status(self.engine, response.status, payload)
            return orjson.loads(payload)
        except Exception as exc:
            mapped = engine_error(self.engine, self.base_url + path, exc)
            if mapped is None or mapped is exc:
                raise
            raise mapped from exc

    async def get_json(self, path: str) -> Any:
        """GET `path` and decode its JSON body."""
        with map_http_errors(self.engine, self.base_url + path):
            response = await self.http().request("GET", path)
            body = await response.read()
            if response.status >= 400:
                raise error_for_status(self.engine, response.status, body)
            return orjson.loads(body)

    async def read_json(self, response: HTTP1Response) -> Any:
        """The decoded JSON body of a response from `post`, errors mapped."""
        with map_http_errors(self.engine, self.base_url):
            return orjson.loads(await response.read())

    async def close(self) -> None:
        """Close the connections; the next request opens new ones."""
        if self._http is not None:
            await self._http.close()
        self._http = None
        self._loop = None


@dataclass(slots=True)
class _Inflight:
    aborted: bool = False
    response: HTTP1Response | None = None
    task: asyncio.Task[Any] | None = None


@dataclass(slots=True)
class InflightRequests:
    """Requests in flight by id, so `abort(request_id)` can reach the one that runs it.

    A plain request is aborted by cancelling the task awaiting it (it awaits nothing but the
    engine); a stream by closing its response, which the engine sees as a disconnect.
    """

    _requests: dict[str, _Inflight] = field(default_factory=dict)

    @contextlib.contextmanager
    def track(self, request_id: str, *, cancel_task: bool) -> Iterator[_Inflight]:
        entry = self.add(request_id, cancel_task=cancel_task)
        try:
            yield entry
        finally:
            self.remove(request_id)

    def add(self, request_id: str, *, cancel_task: bool) -> _Inflight:
        """Register `request_id` (`track` without the context manager; `remove` it after)."""
        if request_id in self._requests:
            msg = f"request id {request_id!r} is already in flight"
            raise EngineError(msg)
        entry = _Inflight(task=asyncio.current_task() if cancel_task else None)
        self._requests[request_id] = entry
        return entry

    def remove(self, request_id: str) -> None:
        del self._requests[request_id]

    def abort(self, request_id: str) -> bool:
        """Abort `request_id`; False when no such request is in flight."""
        entry = self._requests.get(request_id)
        if entry is None or entry.aborted:
            return False
        entry.aborted = True
        if entry.response is not None:
            entry.response.close()
        elif entry.task is not None:
            entry.task.cancel()
        return True

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._requests

    def __len__(self) -> int:
        return len(self._requests)


class HTTPEngineBase:
    """What every engine behind an HTTP server shares: its client, the requests in flight, and the
    policy-version counter (the server does not know rltap's versions; tokens are stamped here)."""

    engine_name: str = "engine"

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None,
        timeout: float | None,
        connect_timeout: float,
        version: int,
        logprob_convention: LogprobConvention,
        max_connections: int,
    ) -> None:
        self._client = EngineHTTPClient(
            url,
            engine=self.engine_name,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_connections=max_connections,
        )
        self.logprob_convention = logprob_convention
        self._version = version
        self._inflight = InflightRequests()

    @property
    def url(self) -> str:
        return self._client.base_url

    @property
    def version(self) -> int:
        """The policy version stamped on tokens generated from now on."""
        return self._version

    def set_version(self, version: int) -> None:
        """Declare the policy version after a trainer pushed new weights to the server."""
        self._version = version

    async def close(self) -> None:
        """Close the HTTP session. Requests in flight fail; the engine can be started again."""
        await self._client.close()
