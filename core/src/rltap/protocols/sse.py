"""Server-sent events: what one event holds, and the one place it becomes bytes on the wire."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["SSEEvent", "format_sse"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One server-sent event before formatting: `event:` name (None for none) and the `data:`.

    `data` is a JSON-serialisable dict, or a literal string such as "[DONE]".
    """

    event: str | None
    data: dict[str, Any] | str


def format_sse(event: SSEEvent) -> bytes:
    """`event: <name>` (when named) and `data: <json or literal>`, then a blank line."""
    data = event.data if isinstance(event.data, str) else orjson.dumps(event.data).decode()
    if event.event is None:
        return f"data: {data}\n\n".encode()
    return f"event: {event.event}\ndata: {data}\n\n".encode()
