"""rltap's error type for a proxy error that arrived inside a stream.

The base adapter maps HTTP errors by status code. An error that happens after a stream has
started reaches the client as an SSE error event: the openai SDK raises `APIError` without a
status, carrying the proxy's error body (`type` and `code`, e.g. `api_error` / `engine_error`).
This maps that body back to the class the proxy raised.
"""

from __future__ import annotations

from collections.abc import Mapping

from rltap import errors
from rltap.adapter import rltap_error_from

__all__ = ["rltap_error_in"]


def _by_type_and_code() -> dict[tuple[str, str | None], type[errors.RltapError]]:
    table: dict[tuple[str, str | None], type[errors.RltapError]] = {}
    pending: list[type[errors.RltapError]] = [errors.RltapError]
    while pending:  # breadth first: a base class keeps a key its subclass repeats
        kind = pending.pop(0)
        table.setdefault((kind.error_type, kind.code), kind)
        pending.extend(kind.__subclasses__())
    return table


_ERRORS_BY_BODY = _by_type_and_code()


def _from_body(exc: BaseException) -> errors.RltapError | None:
    body = getattr(exc, "body", None)
    if getattr(exc, "status_code", None) is not None or not isinstance(body, Mapping):
        return None
    error_type = body.get("type")
    if not isinstance(error_type, str):
        return None
    code = body.get("code")
    kind = _ERRORS_BY_BODY.get((error_type, code)) or _ERRORS_BY_BODY.get((error_type, None))
    if kind is None:
        return None
    message = body.get("message") or str(exc)
    return kind(f"error event from the proxy: {message}")


def rltap_error_in(exc: BaseException) -> errors.RltapError | None:
    """rltap's error for an HTTP status or an SSE error body in `exc`'s cause chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _from_body(current)
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return rltap_error_from(exc)
