"""Messages streams: the SSE event sequence, and the SDK's accumulator rebuilding the body."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from rltap.protocols.anthropic_messages import StreamEncoder, build_response, parse_request
from rltap.protocols.sse import SSEEvent
from rltap.record.errors import EngineUnavailable
from rltap.record.generation import Generation, GenerationDelta, GenerationEnd, GenerationStart
from rltap.record.parsed import ContentDelta, Delta, ToolCallArgumentsDelta, ToolCallStartDelta
from rltap.tree.canonical import canonical_message

from ..wire import sse_bytes
from .support import (
    GENERATIONS,
    USER,
    as_params,
    body,
    deltas_of,
    encode_all,
    make_generation,
    request_for,
    sdk_client,
    sdk_stream_final,
    stream_events,
)

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


@pytest.mark.parametrize(
    "size", [pytest.param(1, id="char-pieces"), pytest.param(1000, id="whole")]
)
@pytest.mark.parametrize(("generation", "reason"), GENERATIONS)
async def test_stream_rebuilds_body_in_sdk(generation: Generation, reason: str, size: int) -> None:
    request = request_for(stream=True)
    events = encode_all(request, stream_events(generation, deltas_of(generation, size)))
    for sse in events:
        assert isinstance(sse.data, dict)
        assert sse.event == sse.data["type"]
        if sse.event != "ping":
            EVENT_ADAPTER.validate_python(sse.data)
    final = await sdk_stream_final(sse_bytes(events))
    expected = Message.model_validate(build_response(request, [generation]))
    assert final.model_dump(exclude_none=True) == expected.model_dump(exclude_none=True)
    assert final.stop_reason == reason


def test_stream_event_sequence() -> None:
    generation = make_generation(
        reasoning="Hm.",
        content="Let me check.",
        calls=[("get_weather", '{"city":"Paris"}')],
        finish="tool_calls",
    )
    events = encode_all(
        request_for(stream=True), stream_events(generation, deltas_of(generation, 1000))
    )
    summary = [
        (
            e.event,
            e.data.get("index"),
            (e.data.get("delta") or e.data.get("content_block") or {}).get("type"),
        )
        for e in events
        if isinstance(e.data, dict)
    ]
    assert summary == [
        ("message_start", None, None),
        ("ping", None, None),
        ("content_block_start", 0, "thinking"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, "text"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, "tool_use"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    start = events[0].data
    assert isinstance(start, dict)
    assert start["message"]["id"] == generation.interaction_id
    assert start["message"]["usage"] == {"input_tokens": 5, "output_tokens": 0}
    assert events[-2].data == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"input_tokens": 5, "output_tokens": 7},
    }


async def test_text_after_tool_call_is_a_new_block() -> None:
    # Parsers may release text that follows a tool call; the reply records one content string.
    generation = make_generation(content="Before after", calls=[("f", "{}")], finish="tool_calls")
    deltas: list[Delta] = [
        ContentDelta("Before"),
        ToolCallStartDelta(index=0, id="call_x", name="f"),
        ToolCallArgumentsDelta(index=0, fragment="{}"),
        ContentDelta(" after"),
    ]
    events = encode_all(request_for(stream=True), stream_events(generation, deltas))
    final = await sdk_stream_final(sse_bytes(events))
    assert [b.type for b in final.content] == ["text", "tool_use", "text"]
    history = [USER, final.to_param(), {"role": "user", "content": "ok"}]
    messages = parse_request(body(messages=as_params(history))).messages
    assert canonical_message(messages[1]) == canonical_message(generation.output_message)


async def test_error_mid_stream_reaches_sdk() -> None:
    generation = make_generation(content="Partial answer")
    encoder = StreamEncoder(request_for(stream=True))
    events = [
        sse
        for e in stream_events(generation, deltas_of(generation, 3))[:3]
        for sse in encoder.encode(e)
    ]
    events += encoder.error(EngineUnavailable("engine restarting"))
    assert encoder.finish() == []
    assert encoder.encode(GenerationEnd(generation=generation)) == []
    assert events[-1] == SSEEvent(
        event="error",
        data={
            "type": "error",
            "error": {"type": "overloaded_error", "message": "engine restarting"},
        },
    )
    client = sdk_client(
        lambda request: httpx2.Response(
            200, headers={"content-type": "text/event-stream"}, content=sse_bytes(events)
        )
    )
    with pytest.raises(anthropic.APIStatusError, match="engine restarting"):
        async with client.messages.stream(model="m", max_tokens=64, messages=[USER]) as stream:
            await stream.get_final_message()


def test_finish_without_start_is_empty() -> None:
    encoder = StreamEncoder(request_for(stream=True))
    assert encoder.finish() == []


def test_arguments_before_tool_start_raise() -> None:
    encoder = StreamEncoder(request_for(stream=True))
    encoder.encode(GenerationStart(index=0, interaction_id="msg_1", prompt_tokens=1, created=0.0))
    with pytest.raises(ValueError, match="before its start"):
        encoder.encode(
            GenerationDelta(index=0, deltas=[ToolCallArgumentsDelta(index=0, fragment="{")])
        )
