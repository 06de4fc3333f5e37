"""Responses streaming: session events -> the API's semantic server-sent events.

Every event carries `type` and an increasing `sequence_number`; the SSE `event:` name is the type.
The stream is `response.created`, `response.in_progress`, the output items, then
`response.completed` (or `response.incomplete` when the reply was cut short or aborted) with the
whole response. There is no `[DONE]`.

Output items open and close as the kind of the parser's deltas changes:

- reasoning: `output_item.added`, `content_part.added` (a `reasoning_text` part),
  `reasoning_text.delta`..., then `reasoning_text.done`, `content_part.done`,
  `output_item.done`; it closes when text or a tool call starts. When the request asks for a
  summary (`reasoning.summary`), the same text is the item's summary (see `response.py`):
  `reasoning_summary_part.added` follows `content_part.added`, each `reasoning_text.delta` is
  followed by a `reasoning_summary_text.delta`, and `reasoning_summary_text.done`,
  `reasoning_summary_part.done` come before `output_item.done`;
- text: `output_item.added`, `content_part.added` (`output_text`), `output_text.delta`..., then
  `output_text.done`, `content_part.done`, `output_item.done`. The message stays open across
  tool calls and closes at the end (or when reasoning resumes), so text the model writes after a
  call still lands in the reply's one message, as in the non-streamed body;
- tool call: `output_item.added` (`arguments: ""`), `function_call_arguments.delta`..., then
  `function_call_arguments.done`, `output_item.done`; it closes when anything else starts.

Item ids and the final `response` follow `response.py`, so the SDK's accumulator
(`client.responses.stream`) finds the streamed items in the final response. A generation that
ends without having streamed anything is replayed from its output message; an empty reply still
gets an (empty) message item.

On error: an `error` event with the API's fields (`code`, `message`, `param`) plus an `error`
object, which makes the official SDKs raise `APIError` instead of yielding an event consumers
ignore; then, when `response.created` was sent, `response.failed` with the output so far.

This module must be one piece, though over 400 lines: the encoder's state and the small event
functions over it are one state machine, and either half alone would need the other's types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rltap.protocols.openai_chat.response import error_body
from rltap.protocols.openai_responses.response import (
    ItemStatus,
    function_call_item,
    item_id,
    logprob_entries,
    message_item,
    output_text_part,
    reasoning_item,
    response_error,
    response_object,
    response_status,
    usage,
    wants_summary,
)
from rltap.protocols.sse import SSEEvent
from rltap.record.errors import RltapError
from rltap.record.generation import (
    CanonicalRequest,
    Generation,
    GenerationDelta,
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

_Kind = Literal["reasoning", "message", "function_call"]


@dataclass(slots=True)
class _Item:
    """An output item of the stream: its place, and the text (or arguments) sent so far."""

    kind: _Kind
    id: str
    output_index: int
    parts: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    status: ItemStatus = "in_progress"

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclass(slots=True)
class StreamEncoder:
    """The state of one Responses stream; `encode` turns each session event into SSE events.

    Usage:
        encoder = StreamEncoder(request)
        async for event in session.stream(request):
            for sse in encoder.encode(event): send(sse)
        for sse in encoder.finish(): send(sse)
    """

    request: CanonicalRequest
    sequence_number: int = 0
    response_id: str | None = None
    created: float = 0.0
    max_tokens: int | None = None
    items: list[_Item] = field(default_factory=list)
    reasoning: _Item | None = None
    message: _Item | None = None
    call: _Item | None = None
    calls: dict[int, _Item] = field(default_factory=dict)
    logprobs: list[dict[str, Any]] | None = None
    finished: bool = False

    def encode(self, event: StreamEvent) -> list[SSEEvent]:
        """The SSE events for one session event (Responses streams have a single choice)."""
        if isinstance(event, GenerationStart):
            self.max_tokens = event.max_tokens
            return start_events(self, event.interaction_id, event.created)
        if isinstance(event, GenerationDelta):
            return [sse for delta in event.deltas for sse in delta_events(self, delta)]
        return end_events(self, event.generation)

    def finish(self) -> list[SSEEvent]:
        """Nothing: a Responses stream ends with its `response.*` event, not with `[DONE]`."""
        return []

    def error(self, exc: RltapError) -> list[SSEEvent]:
        """The `error` event, then `response.failed` if the response was announced."""
        return error_events(self, exc)


def _emit(state: StreamEncoder, type_: str, **fields: Any) -> SSEEvent:
    data = {"type": type_, "sequence_number": state.sequence_number, **fields}
    state.sequence_number += 1
    return SSEEvent(event=type_, data=data)


def _snapshot(state: StreamEncoder, **fields: Any) -> dict[str, Any]:
    assert state.response_id is not None
    return response_object(
        state.request,
        response_id=state.response_id,
        created=state.created,
        max_tokens=state.max_tokens,
        **fields,
    )


def start_events(state: StreamEncoder, response_id: str, created: float) -> list[SSEEvent]:
    """`response.created` and `response.in_progress` (once per stream)."""
    if state.response_id is not None:
        return []
    state.response_id = response_id
    state.created = created
    return [
        _emit(state, kind, response=_snapshot(state, status="in_progress", output=[]))
        for kind in ("response.created", "response.in_progress")
    ]


def delta_events(state: StreamEncoder, delta: Delta) -> list[SSEEvent]:
    """The events for one parser delta, opening and closing items as its kind changes."""
    if isinstance(delta, ReasoningDelta):
        return reasoning_events(state, delta.text)
    if isinstance(delta, ContentDelta):
        return text_events(state, delta.text)
    if isinstance(delta, ToolCallStartDelta):
        return call_start_events(state, delta)
    return call_arguments_events(state, delta)


def _open(state: StreamEncoder, kind: _Kind, **fields: Any) -> _Item:
    assert state.response_id is not None
    index = len(state.items)
    item = _Item(kind, item_id(state.response_id, kind, index), index, **fields)
    state.items.append(item)
    return item


def _added_events(state: StreamEncoder, item: _Item) -> list[SSEEvent]:
    events = [
        _emit(
            state,
            "response.output_item.added",
            output_index=item.output_index,
            item=_item_body(state, item, content=False),
        )
    ]
    if item.kind != "function_call":
        events.append(
            _emit(
                state,
                "response.content_part.added",
                item_id=item.id,
                output_index=item.output_index,
                content_index=0,
                part=_part(item, ""),
            )
        )
    if item.kind == "reasoning" and wants_summary(state.request):
        events.append(_summary_event(state, item, "part.added", part=_summary_part("")))
    return events


def _summary_part(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _summary_event(state: StreamEncoder, item: _Item, kind: str, **fields: Any) -> SSEEvent:
    """A `response.reasoning_summary_<kind>` event of the reasoning item's one summary part."""
    return _emit(
        state,
        f"response.reasoning_summary_{kind}",
        item_id=item.id,
        output_index=item.output_index,
        summary_index=0,
        **fields,
    )


def reasoning_events(state: StreamEncoder, text: str) -> list[SSEEvent]:
    """More reasoning: close text or call items, open a reasoning item if none is open."""
    events = close_call(state) + close_message(state, "completed")
    if state.reasoning is None:
        state.reasoning = _open(state, "reasoning")
        events += _added_events(state, state.reasoning)
    item = state.reasoning
    item.parts.append(text)
    events.append(
        _emit(
            state,
            "response.reasoning_text.delta",
            item_id=item.id,
            output_index=item.output_index,
            content_index=0,
            delta=text,
        )
    )
    if wants_summary(state.request):
        events.append(_summary_event(state, item, "text.delta", delta=text))
    return events


def text_events(state: StreamEncoder, text: str) -> list[SSEEvent]:
    """More text: close reasoning or call items, open the message if it is not open."""
    events = close_reasoning(state, "completed") + close_call(state)
    if state.message is None:
        state.message = _open(state, "message")
        events += _added_events(state, state.message)
    item = state.message
    item.parts.append(text)
    events.append(
        _emit(
            state,
            "response.output_text.delta",
            item_id=item.id,
            output_index=item.output_index,
            content_index=0,
            delta=text,
            logprobs=[],
        )
    )
    return events


def call_start_events(state: StreamEncoder, delta: ToolCallStartDelta) -> list[SSEEvent]:
    """A new tool call: close reasoning and the previous call, open a `function_call` item."""
    events = close_reasoning(state, "completed") + close_call(state)
    item = _open(state, "function_call", call_id=delta.id, name=delta.name)
    state.call = state.calls[delta.index] = item
    return events + _added_events(state, item)


def call_arguments_events(state: StreamEncoder, delta: ToolCallArgumentsDelta) -> list[SSEEvent]:
    """More arguments of the open tool call."""
    item = state.calls.get(delta.index)
    if item is None or item is not state.call:
        msg = f"arguments for tool call {delta.index}, which is not the open call"
        raise ValueError(msg)
    item.parts.append(delta.fragment)
    return [
        _emit(
            state,
            "response.function_call_arguments.delta",
            item_id=item.id,
            output_index=item.output_index,
            delta=delta.fragment,
        )
    ]


def close_reasoning(state: StreamEncoder, status: ItemStatus) -> list[SSEEvent]:
    """Close the open reasoning item, if any."""
    item, state.reasoning = state.reasoning, None
    if item is None:
        return []
    item.status = status
    text = item.text
    events = [
        _emit(
            state,
            "response.reasoning_text.done",
            item_id=item.id,
            output_index=item.output_index,
            content_index=0,
            text=text,
        )
    ]
    if wants_summary(state.request):
        events.append(_summary_event(state, item, "text.done", text=text))
        events.append(_summary_event(state, item, "part.done", part=_summary_part(text)))
    return events + _part_done_events(state, item)


def close_message(state: StreamEncoder, status: ItemStatus) -> list[SSEEvent]:
    """Close the open message item, if any."""
    item, state.message = state.message, None
    if item is None:
        return []
    item.status = status
    return [
        _emit(
            state,
            "response.output_text.done",
            item_id=item.id,
            output_index=item.output_index,
            content_index=0,
            text=item.text,
            logprobs=[],
        ),
        *_part_done_events(state, item),
    ]


def close_call(state: StreamEncoder) -> list[SSEEvent]:
    """Close the open tool call, if any."""
    item, state.call = state.call, None
    if item is None:
        return []
    item.status = "completed"
    return [
        _emit(
            state,
            "response.function_call_arguments.done",
            item_id=item.id,
            output_index=item.output_index,
            name=item.name,
            arguments=item.text,
        ),
        _emit(
            state,
            "response.output_item.done",
            output_index=item.output_index,
            item=_item_body(state, item),
        ),
    ]


def _part_done_events(state: StreamEncoder, item: _Item) -> list[SSEEvent]:
    return [
        _emit(
            state,
            "response.content_part.done",
            item_id=item.id,
            output_index=item.output_index,
            content_index=0,
            part=_part(item, item.text),
        ),
        _emit(
            state,
            "response.output_item.done",
            output_index=item.output_index,
            item=_item_body(state, item),
        ),
    ]


def _part(item: _Item, text: str) -> dict[str, Any]:
    if item.kind == "reasoning":
        return {"type": "reasoning_text", "text": text}
    return output_text_part(text)


def _item_body(state: StreamEncoder, item: _Item, *, content: bool = True) -> dict[str, Any]:
    if item.kind == "reasoning":
        summary = wants_summary(state.request)
        return reasoning_item(item.id, item.text, item.status, content=content, summary=summary)
    if item.kind == "message":
        text = item.text if content else None
        return message_item(item.id, text, item.status, logprobs=state.logprobs)
    arguments = item.text if content else ""
    return function_call_item(item.id, item.call_id, item.name, arguments, item.status)


def _replay(message: dict[str, Any]) -> list[Delta]:
    # A session that streamed no deltas still gets the reply's items onto the wire.
    deltas: list[Delta] = []
    if message.get("reasoning_content"):
        deltas.append(ReasoningDelta(message["reasoning_content"]))
    if isinstance(message.get("content"), str) and message["content"]:
        deltas.append(ContentDelta(message["content"]))
    for i, call in enumerate(message.get("tool_calls") or []):
        deltas.append(ToolCallStartDelta(i, call["id"], call["function"]["name"]))
        deltas.append(ToolCallArgumentsDelta(i, call["function"]["arguments"]))
    return deltas


def end_events(state: StreamEncoder, generation: Generation) -> list[SSEEvent]:
    """Close every open item, then `response.completed` (or `.incomplete`) with the response."""
    if state.finished:
        return []
    state.max_tokens = generation.max_tokens
    events = start_events(state, generation.interaction_id, generation.created)
    if not state.items:
        for delta in _replay(generation.output_message):
            events += delta_events(state, delta)
    if not state.items:
        events += text_events(state, "")
    status = response_status(generation.finish_reason)
    text_status: ItemStatus = "completed" if status == "completed" else "incomplete"
    if state.request.logprobs:
        state.logprobs = logprob_entries(
            generation.token_texts, generation.response.output_logprobs
        )
    events += close_reasoning(state, text_status) + close_call(state)
    events += close_message(state, text_status)
    completed_at = generation.created + generation.response.latency
    response = _snapshot(
        state,
        status=status,
        output=[_item_body(state, item) for item in state.items],
        usage=usage(generation),
        completed_at=completed_at if status == "completed" else None,
    )
    kind = "response.completed" if status == "completed" else "response.incomplete"
    state.finished = True
    return [*events, _emit(state, kind, response=response)]


def error_events(state: StreamEncoder, exc: RltapError) -> list[SSEEvent]:
    """`error`, then `response.failed` when `response.created` was sent; nothing after the end."""
    if state.finished:
        return []
    state.finished = True
    body = error_body(exc)["error"]
    events = [
        _emit(
            state,
            "error",
            code=exc.code or exc.error_type,
            message=exc.message,
            param=exc.param,
            error=body,
        )
    ]
    if state.response_id is not None:
        output = [_item_body(state, item) for item in state.items]
        for item in output:
            if item["status"] == "in_progress":
                item["status"] = "incomplete"
        response = _snapshot(state, status="failed", output=output, error=response_error(exc))
        events.append(_emit(state, "response.failed", response=response))
    return events
