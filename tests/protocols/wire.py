"""What every API's tests need: a hand-made output message, a whole stream encoded, SSE text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from rltap.protocols import StreamEncoder
from rltap.protocols.sse import SSEEvent
from rltap.record.generation import StreamEvent
from rltap.record.parsed import ParsedToolCall


def assistant_message(
    content: str, reasoning: str | None, tool_calls: Sequence[ParsedToolCall]
) -> dict[str, Any]:
    """The canonical output message of a hand-made generation (no content: `None`)."""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in tool_calls
        ]
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def encode_stream(encoder: StreamEncoder, events: Sequence[StreamEvent]) -> list[SSEEvent]:
    """`encoder`'s events for `events`, then those of `finish()`."""
    out = [sse for event in events for sse in encoder.encode(event)]
    return out + encoder.finish()


def sse_bytes(events: Sequence[SSEEvent]) -> bytes:
    """SSE text as `rltap.protocols.sse` writes it."""
    out = bytearray()
    for event in events:
        if event.event is not None:
            out += f"event: {event.event}\n".encode()
        data = event.data.encode() if isinstance(event.data, str) else orjson.dumps(event.data)
        out += b"data: " + data + b"\n\n"
    return bytes(out)
