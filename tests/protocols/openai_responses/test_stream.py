"""Responses streams: the `response.*` semantic events, and the SDK rebuilding the response."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx2
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from rltap.protocols import openai_responses as proto
from rltap.protocols.sse import SSEEvent
from rltap.record.errors import CapacityExhausted, EngineError
from rltap.record.generation import GenerationDelta, GenerationEnd, GenerationStart, StreamEvent
from rltap.record.parsed import (
    ContentDelta,
    Delta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
)
from rltap.tree.canonical import canonical_message

from ..wire import sse_bytes
from .support import (
    CASE_PARAMS,
    CASES,
    CREATED,
    encode_all,
    make_generation,
    request_for,
    resent_history,
    sdk_client,
    stream_events,
)

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def check_events(sses: Sequence[SSEEvent]) -> list[Any]:
    """Every event is a valid SDK event named by its type, numbered 0, 1, 2, ..."""
    parsed = []
    for number, sse in enumerate(sses):
        assert isinstance(sse.data, dict)
        assert sse.event == sse.data["type"]
        assert sse.data["sequence_number"] == number
        parsed.append(EVENT_ADAPTER.validate_python(sse.data))
    return parsed


def sse_handler(sses: Sequence[SSEEvent]) -> Callable[[httpx2.Request], httpx2.Response]:
    payload = sse_bytes(sses)

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/responses"
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=payload)

    return handler


def test_event_sequence_text_and_call() -> None:
    generation = make_generation(
        content="Hi", calls=[("call_1", "get_weather", "{}")], finish="tool_calls"
    )
    sses = encode_all(request_for(), stream_events(generation))
    check_events(sses)
    assert [s.event for s in sses] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_event_sequence_reasoning() -> None:
    generation = make_generation(reasoning="Hmm.", content="Hi.")
    sses = encode_all(request_for(), stream_events(generation))
    kinds = [s.event for s in sses]
    assert kinds[2:9] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    done = sses[8].data
    assert isinstance(done, dict)
    assert done["item"]["content"] == [{"type": "reasoning_text", "text": "Hmm."}]


def test_event_sequence_reasoning_with_summary() -> None:
    generation = make_generation(reasoning="Hmm.", content="Hi.")
    sses = encode_all(request_for(reasoning={"summary": "auto"}), stream_events(generation))
    events = check_events(sses)
    assert [s.event for s in sses][2:14] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.done",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    summary_deltas = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert "".join(summary_deltas) == "Hmm."
    assert {e.summary_index for e in events if "summary" in e.type} == {0}
    assert events[10].text == "Hmm."
    assert events[13].item.summary[0].model_dump() == {"type": "summary_text", "text": "Hmm."}


@pytest.mark.parametrize("summary", [pytest.param(None, id="no-summary"), "auto"])
@pytest.mark.parametrize("kwargs", CASE_PARAMS)
def test_stream_final_response_matches_body(kwargs: dict[str, Any], summary: str | None) -> None:
    generation = make_generation(**kwargs)
    request = request_for(
        stream=True, include=["message.output_text.logprobs"], reasoning={"summary": summary}
    )
    sses = encode_all(request, stream_events(generation))
    events = check_events(sses)
    final = events[-1]
    expected = (
        "response.completed" if final.response.status == "completed" else ("response.incomplete")
    )
    assert final.type == expected
    assert sses[-1].data["response"] == proto.build_response(request, [generation])  # type: ignore[index]


def test_stream_without_deltas_replays_the_reply() -> None:
    generation = make_generation(**CASES["text-reasoning-two-calls"])
    request = request_for(stream=True)
    sses = encode_all(request, [GenerationEnd(generation=generation)])
    check_events(sses)
    assert sses[0].event == "response.created"
    assert sses[-1].data["response"] == proto.build_response(request, [generation])  # type: ignore[index]


@pytest.mark.parametrize("summary", [pytest.param(None, id="no-summary"), "detailed"])
@pytest.mark.parametrize("kwargs", CASE_PARAMS)
async def test_sdk_stream_accumulator_reconstructs_the_response(
    kwargs: dict[str, Any], summary: str | None
) -> None:
    generation = make_generation(**kwargs)
    request = request_for(stream=True, reasoning={"summary": summary})
    sses = encode_all(request, stream_events(generation))
    client = sdk_client(sse_handler(sses))
    async with client.responses.stream(model="qwen", input="Weather in Paris?") as stream:
        seen = [event async for event in stream]
        if seen[-1].type == "response.completed":
            final: Response = await stream.get_final_response()
        else:
            # The helper only returns completed responses; an incomplete one is the last event's.
            assert seen[-1].type == "response.incomplete"
            final = seen[-1].response
    expected = Response.model_validate(proto.build_response(request, [generation]))
    assert final.output_text == expected.output_text == kwargs.get("content", "")
    # The accumulator's parsed copies add `parsed` / `parsed_arguments` (None: no text format).
    dump = [i.model_dump(exclude_none=True) for i in final.output]
    assert dump == [i.model_dump(exclude_none=True) for i in expected.output]
    assert (final.id, final.status, final.usage) == (expected.id, expected.status, expected.usage)


def test_error_mid_stream() -> None:
    generation = make_generation(content="Sunny today.")
    encoder = proto.StreamEncoder(request_for(stream=True))
    sses = [sse for event in stream_events(generation)[:3] for sse in encoder.encode(event)]
    sses += encoder.error(EngineError("engine died"))
    sses += encoder.finish()
    events = check_events(sses)
    error, failed = events[-2], events[-1]
    assert (error.type, error.message, error.code) == ("error", "engine died", "engine_error")
    assert failed.type == "response.failed"
    assert failed.response.status == "failed"
    assert failed.response.error.code == "server_error"
    assert failed.response.output[0].status == "incomplete"
    assert encoder.error(EngineError("again")) == []


def test_error_before_start_sends_only_the_error_event() -> None:
    encoder = proto.StreamEncoder(request_for(stream=True))
    sses = encoder.error(CapacityExhausted("busy"))
    assert [s.event for s in sses] == ["error"]
    check_events(sses)


async def test_sdk_raises_on_error_event() -> None:
    generation = make_generation(content="Sunny today.")
    encoder = proto.StreamEncoder(request_for(stream=True))
    sses = [sse for event in stream_events(generation)[:3] for sse in encoder.encode(event)]
    sses += encoder.error(EngineError("engine died"))
    client = sdk_client(sse_handler(sses))
    with pytest.raises(openai.APIError, match="engine died"):
        async with client.responses.stream(model="qwen", input="hi") as stream:
            await stream.get_final_response()


@settings(max_examples=60, deadline=None)
@given(
    reasoning=st.text(min_size=0, max_size=12),
    content=st.text(min_size=0, max_size=12),
    n_calls=st.integers(0, 2),
    cuts=st.lists(st.integers(1, 5), min_size=1, max_size=6),
)
def test_stream_equals_body_however_text_is_cut(
    reasoning: str, content: str, n_calls: int, cuts: list[int]
) -> None:
    calls = [(f"call_{i}", "f", f'{{"i": {i}}}') for i in range(n_calls)]
    generation = make_generation(
        content=content,
        reasoning=reasoning or None,
        calls=calls,
        finish="tool_calls" if calls else "stop",
    )
    deltas: list[Delta] = []
    for kind, text in ((ReasoningDelta, reasoning), (ContentDelta, content)):
        at = 0
        for cut in cuts:
            if at < len(text):
                deltas.append(kind(text[at : at + cut]))
                at += cut
        if at < len(text):
            deltas.append(kind(text[at:]))
    for i, (call_id, name, arguments) in enumerate(calls):
        deltas += [ToolCallStartDelta(i, call_id, name), ToolCallArgumentsDelta(i, arguments)]
    request = request_for(stream=True)
    events: list[StreamEvent] = [
        GenerationStart(
            index=0, interaction_id=generation.interaction_id, prompt_tokens=5, created=CREATED
        ),
        *[GenerationDelta(index=0, deltas=[d]) for d in deltas],
        GenerationEnd(generation=generation),
    ]
    sses = encode_all(request, events)
    check_events(sses)
    assert sses[-1].data["response"] == proto.build_response(request, [generation])  # type: ignore[index]


@pytest.mark.parametrize(
    "deltas",
    [
        pytest.param(
            [
                ContentDelta("Let me"),
                ToolCallStartDelta(0, "call_1", "f"),
                ToolCallArgumentsDelta(0, "{}"),
                ContentDelta(" see."),
            ],
            id="text-call-text",
        ),
        pytest.param(
            [
                ToolCallStartDelta(0, "call_1", "f"),
                ToolCallArgumentsDelta(0, "{}"),
                ContentDelta("Let me see."),
            ],
            id="call-then-text",
        ),
    ],
)
def test_text_around_calls_stays_one_turn(deltas: list[Delta]) -> None:
    generation = make_generation(
        content="Let me see.", calls=[("call_1", "f", "{}")], finish="tool_calls"
    )
    request = request_for(stream=True)
    events: list[StreamEvent] = [
        GenerationStart(
            index=0, interaction_id=generation.interaction_id, prompt_tokens=5, created=CREATED
        ),
        GenerationDelta(index=0, deltas=deltas),
        GenerationEnd(generation=generation),
    ]
    sses = encode_all(request, events)
    response = check_events(sses)[-1].response
    assert [item.type for item in response.output].count("message") == 1
    assert response.output_text == "Let me see."
    messages = proto.parse_request({"input": resent_history(response.output)}).messages
    assert canonical_message(messages[1]) == canonical_message(generation.output_message)
