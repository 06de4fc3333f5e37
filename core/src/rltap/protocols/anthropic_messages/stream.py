"""Anthropic Messages streaming: session stream events -> server-sent events.

The event sequence of one reply:

    message_start (empty content, input usage), ping,
    per block: content_block_start, content_block_delta..., content_block_stop
        (text_delta; thinking_delta then one signature_delta before the stop; input_json_delta),
    message_delta (stop_reason, stop_sequence, output usage), message_stop.

A block opens when a delta of another kind arrives (reasoning -> thinking, content -> text, a tool
call start -> tool_use) and closes when the next one opens or the reply ends, so text that a
parser releases after a tool call becomes a second text block; the client's history then joins
the text blocks back into the recorded reply's one string. An error ends the stream with one
`error` event. Each event is built by a small function over the `StreamEncoder` state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rltap.protocols.anthropic_messages.response import error_body, stop_reason, tool_use_id
from rltap.protocols.sse import SSEEvent
from rltap.record.errors import RltapError
from rltap.record.generation import (
    CanonicalRequest,
    Generation,
    GenerationDelta,
    GenerationEnd,
    GenerationStart,
    StreamEvent,
)
from rltap.record.parsed import (
    ContentDelta,
    Delta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
)

__all__ = ["StreamEncoder"]

BlockKind = Literal["text", "thinking", "tool_use"]


@dataclass(slots=True)
class StreamEncoder:
    """The state of one streamed Message and the events that advance it.

    Usage:
        encoder = StreamEncoder(request)
        for event in session_events:
            send_all(encoder.encode(event))
        send_all(encoder.finish())          # or encoder.error(exc) when the session failed
    """

    request: CanonicalRequest
    message_id: str = ""
    started: bool = False
    closed: bool = False
    # Index the next content block gets; the open block's kind and index (None: none open).
    next_block: int = 0
    open_kind: BlockKind | None = None
    open_index: int = -1
    # Tool call index -> its content block index.
    tool_blocks: dict[int, int] = field(default_factory=dict)

    def encode(self, event: StreamEvent) -> list[SSEEvent]:
        """The events for one session event; none once the stream is closed."""
        if self.closed:
            return []
        match event:
            case GenerationStart():
                return message_start_events(self, event)
            case GenerationDelta(deltas=deltas):
                return [sse for delta in deltas for sse in delta_events(self, delta)]
            case GenerationEnd(generation=generation):
                return message_delta_events(self, generation)
        return []

    def finish(self) -> list[SSEEvent]:
        """The closing events: the open block's stop and `message_stop`."""
        return message_stop_events(self)

    def error(self, exc: RltapError) -> list[SSEEvent]:
        """The `error` event that ends the stream (nothing if it already ended)."""
        return error_events(self, exc)


def _sse(data: dict[str, Any]) -> SSEEvent:
    return SSEEvent(event=data["type"], data=data)


def message_start_events(state: StreamEncoder, start: GenerationStart) -> list[SSEEvent]:
    """`message_start` with an empty message, then a `ping` as Anthropic sends one."""
    state.started = True
    state.message_id = start.interaction_id
    message: dict[str, Any] = {
        "id": start.interaction_id,
        "type": "message",
        "role": "assistant",
        "model": state.request.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": start.prompt_tokens, "output_tokens": 0},
    }
    return [_sse({"type": "message_start", "message": message}), _sse({"type": "ping"})]


def delta_events(state: StreamEncoder, delta: Delta) -> list[SSEEvent]:
    """The events for one parser delta."""
    match delta:
        case ContentDelta(text=text):
            return text_events(state, "text", text)
        case ReasoningDelta(text=text):
            return text_events(state, "thinking", text)
        case ToolCallStartDelta():
            return tool_start_events(state, delta)
        case ToolCallArgumentsDelta():
            return tool_arguments_events(state, delta)
    return []


def text_events(
    state: StreamEncoder, kind: Literal["text", "thinking"], text: str
) -> list[SSEEvent]:
    """A text or thinking delta, opening a block of that kind first if another one is open."""
    if not text:
        return []
    events: list[SSEEvent] = []
    if state.open_kind != kind:
        start = (
            {"type": "text", "text": ""}
            if kind == "text"
            else {"type": "thinking", "thinking": "", "signature": ""}
        )
        events.extend(open_block_events(state, kind, start))
    body = (
        {"type": "text_delta", "text": text}
        if kind == "text"
        else {
            "type": "thinking_delta",
            "thinking": text,
        }
    )
    events.append(_sse({"type": "content_block_delta", "index": state.open_index, "delta": body}))
    return events


def tool_start_events(state: StreamEncoder, delta: ToolCallStartDelta) -> list[SSEEvent]:
    """A new tool_use block with an empty `input`; its arguments follow as JSON deltas."""
    start = {"type": "tool_use", "id": tool_use_id(delta.id), "name": delta.name, "input": {}}
    events = open_block_events(state, "tool_use", start)
    state.tool_blocks[delta.index] = state.open_index
    return events


def tool_arguments_events(state: StreamEncoder, delta: ToolCallArgumentsDelta) -> list[SSEEvent]:
    """An `input_json_delta` for the block of the delta's tool call."""
    if not delta.fragment:
        return []
    index = state.tool_blocks.get(delta.index)
    if index is None:
        msg = f"arguments for tool call {delta.index} before its start delta"
        raise ValueError(msg)
    body = {"type": "input_json_delta", "partial_json": delta.fragment}
    return [_sse({"type": "content_block_delta", "index": index, "delta": body})]


def open_block_events(
    state: StreamEncoder, kind: BlockKind, content_block: dict[str, Any]
) -> list[SSEEvent]:
    """Close the open block, then `content_block_start` for the next index."""
    events = close_block_events(state)
    state.open_kind = kind
    state.open_index = state.next_block
    state.next_block += 1
    start = {
        "type": "content_block_start",
        "index": state.open_index,
        "content_block": content_block,
    }
    events.append(_sse(start))
    return events


def close_block_events(state: StreamEncoder) -> list[SSEEvent]:
    """`content_block_stop` for the open block; a thinking block gets its signature first."""
    if state.open_kind is None:
        return []
    events: list[SSEEvent] = []
    index = state.open_index
    if state.open_kind == "thinking":
        body = {"type": "signature_delta", "signature": state.message_id}
        events.append(_sse({"type": "content_block_delta", "index": index, "delta": body}))
    events.append(_sse({"type": "content_block_stop", "index": index}))
    state.open_kind = None
    return events


def message_delta_events(state: StreamEncoder, generation: Generation) -> list[SSEEvent]:
    """The reply finished: close its last block, then `message_delta` with the stop reason."""
    events = close_block_events(state)
    reason, sequence = stop_reason(generation)
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": {
            "input_tokens": generation.prompt_tokens,
            "output_tokens": generation.completion_tokens,
        },
    }
    events.append(_sse(delta))
    return events


def message_stop_events(state: StreamEncoder) -> list[SSEEvent]:
    """`message_stop` after closing any open block; nothing if the stream never started."""
    if state.closed or not state.started:
        state.closed = True
        return []
    events = close_block_events(state)
    events.append(_sse({"type": "message_stop"}))
    state.closed = True
    return events


def error_events(state: StreamEncoder, exc: RltapError) -> list[SSEEvent]:
    """One `error` event with Anthropic's error envelope; the stream ends after it."""
    if state.closed:
        return []
    state.closed = True
    return [_sse(error_body(exc))]
