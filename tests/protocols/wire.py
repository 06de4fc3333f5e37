"""What every API's stream tests need: the encoder run over a whole stream, and its SSE text."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from rltap.generation import StreamEvent
from rltap.protocols import StreamEncoder
from rltap.sse import SSEEvent


def encode_stream(encoder: StreamEncoder, events: Sequence[StreamEvent]) -> list[SSEEvent]:
    """`encoder`'s events for `events`, then those of `finish()`."""
    out = [sse for event in events for sse in encoder.encode(event)]
    return out + encoder.finish()


def sse_bytes(events: Sequence[SSEEvent]) -> bytes:
    """SSE text as `rltap.sse` writes it."""
    out = bytearray()
    for event in events:
        if event.event is not None:
            out += f"event: {event.event}\n".encode()
        data = event.data.encode() if isinstance(event.data, str) else orjson.dumps(event.data)
        out += b"data: " + data + b"\n\n"
    return bytes(out)
