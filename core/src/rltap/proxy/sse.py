"""Server-sent events: the one place an `SSEEvent` becomes bytes on the wire."""

from __future__ import annotations

import orjson

from rltap.protocols.base import SSEEvent

__all__ = ["format_sse"]


def format_sse(event: SSEEvent) -> bytes:
    """`event: <name>` (when named) and `data: <json or literal>`, then a blank line."""
    data = event.data if isinstance(event.data, str) else orjson.dumps(event.data).decode()
    if event.event is None:
        return f"data: {data}\n\n".encode()
    return f"event: {event.event}\ndata: {data}\n\n".encode()
