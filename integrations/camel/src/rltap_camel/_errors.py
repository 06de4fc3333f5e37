"""rltap's error for an error event inside a streamed reply.

The proxy reports a failure that happens after a stream has started (the engine dies mid-reply)
as an SSE error event carrying the error body, not an HTTP status; the OpenAI SDK raises it as a
bare `openai.APIError` with that body. `rltap.adapter.rltap_error_from` maps HTTP statuses only,
so the body's machine-readable `code` is mapped here, to the rltap error that declares it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import openai

from rltap import errors

__all__ = ["stream_error_from"]


def _error_classes(base: type[errors.RltapError]) -> Iterator[type[errors.RltapError]]:
    for subclass in base.__subclasses__():
        yield subclass
        yield from _error_classes(subclass)


def _class_for_code(code: object) -> type[errors.RltapError] | None:
    if not isinstance(code, str):
        return None
    return next((kind for kind in _error_classes(errors.RltapError) if kind.code == code), None)


def stream_error_from(exc: BaseException) -> errors.RltapError | None:
    """The rltap error of a streamed error event anywhere in `exc`'s cause chain, or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, openai.APIError) and not isinstance(current, openai.APIStatusError):
            body = current.body
            kind = _class_for_code(body.get("code")) if isinstance(body, Mapping) else None
            if kind is not None:
                return kind(f"error event in the stream from the proxy: {current.message}")
        current = current.__cause__ or current.__context__
    return None
