"""Chat Completions streaming: session events -> `chat.completion.chunk` server-sent events.

Per choice: a first chunk with only `delta.role = "assistant"`, then content,
`reasoning_content` and `tool_calls` deltas (a call's first delta carries its index, id, type,
name and `arguments: ""`; later ones only argument fragments), then a chunk with
`finish_reason`. After every choice: a `usage` chunk with `choices: []` when
`stream_options.include_usage` was set, then `[DONE]`. On error the stream ends with
`data: {"error": {...}}` and `[DONE]`, as vLLM does.

Every chunk carries the id of choice 0's interaction. The official SDK's accumulator places a
choice at the position it first appears, so choices must first appear in index order: the chunks
of a choice whose lower-indexed siblings have not started yet are held back until they have.
Logprobs of tokens the output parser held back ride on the next chunk of that choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rltap.protocols.openai_chat.response import (
    error_body,
    logprob_entries,
    usage,
    wire_finish_reason,
)
from rltap.protocols.sse import SSEEvent
from rltap.record.errors import RltapError
from rltap.record.generation import (
    CanonicalRequest,
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

__all__ = [
    "DONE",
    "StreamEncoder",
    "delta_entries",
    "delta_wire",
    "end_entries",
    "flush_held",
    "release",
    "start_entries",
    "usage_event",
]

DONE = SSEEvent(None, "[DONE]")
"""The last event of every Chat Completions stream."""

# One `choices[]` entry of a chunk: {"index", "delta", "logprobs", "finish_reason"}.
ChoiceEntry = dict[str, Any]


@dataclass(slots=True)
class StreamEncoder:
    """The state of one streamed response and the entry points the proxy calls.

    Usage:
        encoder = StreamEncoder(request)
        async for event in session.stream(request):
            send(encoder.encode(event))
        send(encoder.finish())          # or, on an exception: send(encoder.error(exc))
    """

    request: CanonicalRequest
    completion_id: str = ""
    created: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Choices that have started; choices below `released` have their chunks sent as they come.
    started: set[int] = field(default_factory=set)
    released: int = 0
    held: dict[int, list[ChoiceEntry]] = field(default_factory=dict)
    # Logprob entries of tokens whose text no chunk has carried yet, per choice.
    pending_logprobs: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    closed: bool = False

    def encode(self, event: StreamEvent) -> list[SSEEvent]:
        """The chunks for one session event (possibly none yet, possibly earlier held ones)."""
        if isinstance(event, GenerationStart):
            return release(self, event.index, start_entries(self, event))
        if isinstance(event, GenerationDelta):
            return release(self, event.index, delta_entries(self, event))
        return release(self, event.generation.index, end_entries(self, event))

    def finish(self) -> list[SSEEvent]:
        """The closing events: anything held, the usage chunk if asked for, `[DONE]`."""
        if self.closed:
            return []
        self.closed = True
        events = flush_held(self)
        if self.request.include_usage:
            events.append(usage_event(self))
        events.append(DONE)
        return events

    def error(self, exc: RltapError) -> list[SSEEvent]:
        """The events that end a failed stream: anything held, the error, `[DONE]`."""
        if self.closed:
            return []
        self.closed = True
        return [*flush_held(self), SSEEvent(None, error_body(exc)), DONE]


def _chunk(state: StreamEncoder, choices: list[ChoiceEntry], **extra: Any) -> SSEEvent:
    data = {
        "id": state.completion_id,
        "object": "chat.completion.chunk",
        "created": state.created,
        "model": state.request.model,
        "choices": choices,
    }
    return SSEEvent(None, data | extra)


def _entry(index: int, delta: dict[str, Any]) -> ChoiceEntry:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}


def start_entries(state: StreamEncoder, event: GenerationStart) -> list[ChoiceEntry]:
    """The role chunk of a new choice; choice 0 also fixes the stream's id and `created`."""
    state.started.add(event.index)
    if event.index == 0 or not state.completion_id:
        state.completion_id = event.interaction_id
        state.created = int(event.created)
    state.prompt_tokens = max(state.prompt_tokens, event.prompt_tokens)
    # No `content` here: a reply of only tool calls then accumulates to `content: null`, as the
    # non-streaming body has it.
    entry = _entry(event.index, {"role": "assistant"})
    if state.request.n > 1:
        # Every choice is its own interaction; the client needs each id to reward it.
        entry["interaction_id"] = event.interaction_id
    return [entry]


def _text_delta(delta: Delta) -> tuple[str, str] | None:
    if isinstance(delta, ContentDelta):
        return "content", delta.text
    if isinstance(delta, ReasoningDelta):
        return "reasoning_content", delta.text
    return None


def delta_wire(deltas: list[Delta]) -> list[dict[str, Any]]:
    """The `delta` objects for parser deltas; runs of the same kind merge into one."""
    out: list[dict[str, Any]] = []
    last: tuple[str, int] | None = None  # what the last delta object holds: (kind, call index)
    for delta in deltas:
        text = _text_delta(delta)
        if text is not None:
            key, value = text
            if not value:
                continue
            if last == (key, -1):
                out[-1][key] += value
            else:
                out.append({key: value})
                last = (key, -1)
        elif isinstance(delta, ToolCallStartDelta):
            function = {"name": delta.name, "arguments": ""}
            call = {"index": delta.index, "id": delta.id, "type": "function", "function": function}
            out.append({"tool_calls": [call]})
            last = ("start", delta.index)
        elif isinstance(delta, ToolCallArgumentsDelta) and delta.fragment:
            if last == ("arguments", delta.index):
                out[-1]["tool_calls"][0]["function"]["arguments"] += delta.fragment
            else:
                fragment = {"index": delta.index, "function": {"arguments": delta.fragment}}
                out.append({"tool_calls": [fragment]})
                last = ("arguments", delta.index)
    return out


def _take_logprobs(state: StreamEncoder, index: int) -> dict[str, Any] | None:
    pending = state.pending_logprobs.pop(index, None)
    return {"content": pending, "refusal": None} if pending else None


def delta_entries(state: StreamEncoder, event: GenerationDelta) -> list[ChoiceEntry]:
    """Content, reasoning and tool-call chunks for one engine chunk of a choice."""
    if state.request.logprobs and event.token_ids:
        entries = logprob_entries(
            event.token_ids, event.logprobs, event.token_texts, state.request.top_logprobs
        )
        state.pending_logprobs.setdefault(event.index, []).extend(entries)
    out = [_entry(event.index, delta) for delta in delta_wire(event.deltas)]
    if out:
        out[0]["logprobs"] = _take_logprobs(state, event.index)
    return out


def end_entries(state: StreamEncoder, event: GenerationEnd) -> list[ChoiceEntry]:
    """The chunk that closes a choice with its finish reason (and any logprobs still owed)."""
    generation = event.generation
    state.completion_tokens += generation.completion_tokens
    state.prompt_tokens = max(state.prompt_tokens, generation.prompt_tokens)
    entry = _entry(generation.index, {})
    entry["finish_reason"] = wire_finish_reason(generation.finish_reason)
    entry["logprobs"] = _take_logprobs(state, generation.index)
    return [entry]


def release(state: StreamEncoder, index: int, entries: list[ChoiceEntry]) -> list[SSEEvent]:
    """Chunks for `entries` of choice `index` that may go out now, with any they unblocked."""
    if index < state.released:
        return [_chunk(state, [entry]) for entry in entries]
    state.held.setdefault(index, []).extend(entries)
    out: list[SSEEvent] = []
    while state.released in state.started:
        out.extend(_chunk(state, [e]) for e in state.held.pop(state.released, []))
        state.released += 1
    return out


def flush_held(state: StreamEncoder) -> list[SSEEvent]:
    """Chunks still held (a choice whose lower siblings never started), in index order."""
    out: list[SSEEvent] = []
    for index in sorted(state.held):
        out.extend(_chunk(state, [e]) for e in state.held.pop(index))
    return out


def usage_event(state: StreamEncoder) -> SSEEvent:
    """The final `usage` chunk (`choices: []`): prompt counted once, completions summed."""
    return _chunk(state, [], usage=usage(state.prompt_tokens, state.completion_tokens))
