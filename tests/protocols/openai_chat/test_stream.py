"""Chat Completions streams: `chat.completion.chunk` events, and the SDK rebuilding the reply."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from rltap.protocols import openai_chat as proto
from rltap.protocols.sse import SSEEvent
from rltap.record.errors import EngineError
from rltap.record.generation import StreamEvent
from rltap.record.parsed import (
    ContentDelta,
    Delta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
)

from ..wire import sse_bytes
from .support import (
    PROMPT_LEN,
    SCENARIOS,
    Scenario,
    encode_all,
    events_of,
    generation_of,
    request,
    sdk_client,
)


def chunks_of(events: list[SSEEvent]) -> list[dict[str, Any]]:
    assert events[-1] == SSEEvent(None, "[DONE]")
    assert all(e.event is None for e in events)
    chunks = [e.data for e in events[:-1]]
    assert all(isinstance(c, dict) for c in chunks)
    return chunks  # type: ignore[return-value]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_stream_chunks_validate(scenario: Scenario) -> None:
    events = events_of(scenario)
    chunks = chunks_of(encode_all(request(stream=True), events))
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
    assert {c["id"] for c in chunks} == {events_of(scenario)[-1].generation.interaction_id}  # type: ignore[union-attr]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant"}
    assert all("role" not in d for d in deltas[1:])
    assert deltas[-1] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == scenario.finish
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    starts = [call for d in deltas for call in d.get("tool_calls", []) if "id" in call]
    assert all(call["function"]["arguments"] == "" for call in starts)
    assert [call["type"] for call in starts] == ["function"] * len(starts)


def test_stream_merges_runs_of_one_kind() -> None:
    deltas: list[Delta] = [
        ContentDelta("a"),
        ContentDelta("b"),
        ReasoningDelta("r"),
        ToolCallStartDelta(0, "c0", "f"),
        ToolCallArgumentsDelta(0, "{"),
        ToolCallArgumentsDelta(0, "}"),
        ContentDelta(""),
    ]
    assert proto.stream.delta_wire(deltas) == [
        {"content": "ab"},
        {"reasoning_content": "r"},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "f", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
    ]


async def _sdk_final(events: list[SSEEvent], **kwargs: Any) -> Any:
    client = sdk_client(sse_bytes(events))
    async with client.chat.completions.stream(
        model="m", messages=[{"role": "user", "content": "hi"}], **kwargs
    ) as stream:
        async for _ in stream:
            pass
        try:
            return await stream.get_final_completion()
        except openai.LengthFinishReasonError as exc:  # raised for any `length` finish
            return exc.completion


def _calls(message: Any) -> list[tuple[str, str, str]]:
    dumped = [call.model_dump() for call in message.tool_calls or []]
    return [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in dumped]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_sdk_stream_accumulates_same_message(scenario: Scenario) -> None:
    req = request(stream=True, stream_options={"include_usage": True}, logprobs=True)
    generation = generation_of(scenario)
    final = await _sdk_final(encode_all(req, events_of(scenario)))
    expected = ChatCompletion.model_validate(proto.build_response(req, [generation]))
    got, want = final.choices[0], expected.choices[0]
    assert final.id == expected.id
    assert got.message.content == (want.message.content or None)
    assert _calls(got.message) == _calls(want.message)
    assert getattr(got.message, "reasoning_content", None) == getattr(
        want.message, "reasoning_content", None
    )
    assert got.finish_reason == want.finish_reason
    assert got.logprobs.model_dump() == want.logprobs.model_dump()  # type: ignore[union-attr]
    assert final.usage.model_dump() == expected.usage.model_dump()  # type: ignore[union-attr]


def _pieces(text: str, cuts: list[int]) -> list[str]:
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    return [text[a:b] for a, b in pairwise(bounds)]


@st.composite
def replies(draw: st.DrawFn) -> Scenario:
    """Reasoning, content and tool calls, each cut into arbitrary pieces and engine chunks."""
    deltas: list[Delta] = []
    reasoning = draw(st.text(min_size=0, max_size=12))
    deltas += [ReasoningDelta(p) for p in _pieces(reasoning, draw(st.lists(st.integers(0, 20))))]
    content = draw(st.text(min_size=0, max_size=12))
    deltas += [ContentDelta(p) for p in _pieces(content, draw(st.lists(st.integers(0, 20))))]
    n_calls = draw(st.integers(0, 3))
    for i in range(n_calls):
        deltas.append(ToolCallStartDelta(i, f"call_{i}", draw(st.sampled_from(["f", "g"]))))
        arguments = orjson.dumps({"x": draw(st.text(max_size=6))}).decode()
        cuts = draw(st.lists(st.integers(0, 20)))
        deltas += [ToolCallArgumentsDelta(i, p) for p in _pieces(arguments, cuts)]
    sizes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))
    steps: list[list[Delta]] = []
    for size in sizes:
        steps.append(deltas[:size])
        deltas = deltas[size:]
    steps.append(deltas)
    return Scenario(steps, "tool_calls" if n_calls else "stop")


@settings(max_examples=60, deadline=None)
@given(replies())
def test_stream_state_rebuilds_message(scenario: Scenario) -> None:
    req = request(stream=True, logprobs=True)
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in chunks_of(encode_all(req, events_of(scenario))):
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    got = state.current_completion_snapshot.choices[0]
    body = proto.build_response(req, [generation_of(scenario)])
    want = ChatCompletion.model_validate(body).choices[0]
    assert (got.message.content or None) == (want.message.content or None)
    assert _calls(got.message) == _calls(want.message)
    reasoning = getattr(got.message, "reasoning_content", None)
    assert reasoning == body["choices"][0]["message"].get("reasoning_content")
    assert got.logprobs is not None
    assert want.logprobs is not None
    assert got.logprobs.model_dump() == want.logprobs.model_dump()


def test_stream_logprobs_ride_on_next_chunk() -> None:
    # The second engine chunk released no text: its logprobs come with the third one.
    scenario = Scenario([[ContentDelta("a")], [], [ContentDelta("b")]], "stop")
    chunks = chunks_of(encode_all(request(stream=True, logprobs=True), events_of(scenario)))
    tokens = [
        [e["token"] for e in (c["choices"][0]["logprobs"] or {}).get("content", [])] for c in chunks
    ]
    assert tokens == [[], ["t0", "t1"], ["t2", "t3", "t4", "t5"], []]


def test_stream_without_usage_has_no_usage_chunk() -> None:
    chunks = chunks_of(
        encode_all(request(stream=True), events_of(Scenario([[ContentDelta("a")]], "stop")))
    )
    assert all("usage" not in c and c["choices"] for c in chunks)


def _interleave(a: list[StreamEvent], b: list[StreamEvent]) -> list[StreamEvent]:
    out: list[StreamEvent] = []
    for pair in zip(a, b, strict=False):
        out.extend(pair)
    return out + a[len(b) :] + b[len(a) :]


@pytest.mark.parametrize(
    "second_first", [pytest.param(False, id="in-order"), pytest.param(True, id="choice-1-first")]
)
async def test_sdk_stream_n_choices(second_first: bool) -> None:
    req = request(n=2, stream=True, stream_options={"include_usage": True})
    one = events_of(Scenario([[ContentDelta("x")], [ContentDelta("y")]], "stop"), 0)
    two = events_of(
        Scenario(
            [[ToolCallStartDelta(0, "c", "f"), ToolCallArgumentsDelta(0, "{}")]], "tool_calls"
        ),
        1,
    )
    events = _interleave(two, one) if second_first else _interleave(one, two)
    sse = encode_all(req, events)
    chunks = chunks_of(sse)
    assert [c["choices"][0]["index"] for c in chunks[:1]] == [0]
    assert {c["id"] for c in chunks} == {f"{proto.ID_PREFIX}0"}
    role_chunks = [
        c["choices"][0] for c in chunks if c["choices"] and "role" in c["choices"][0]["delta"]
    ]
    assert [e["interaction_id"] for e in role_chunks] == [
        f"{proto.ID_PREFIX}0",
        f"{proto.ID_PREFIX}1",
    ]
    final = await _sdk_final(sse, n=2)
    assert [c.message.content for c in final.choices] == ["xy", None]
    assert final.choices[1].message.tool_calls[0].function.name == "f"
    assert [c.finish_reason for c in final.choices] == ["stop", "tool_calls"]
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (PROMPT_LEN, 6)


async def test_stream_error_mid_stream() -> None:
    req = request(stream=True)
    encoder = proto.StreamEncoder(req)
    events = events_of(Scenario([[ContentDelta("partial")]], "stop"))[:2]
    sse = [s for e in events for s in encoder.encode(e)]
    sse += encoder.error(EngineError("engine went away"))
    assert encoder.finish() == []
    assert sse[-2:] == [
        SSEEvent(
            None,
            {
                "error": {
                    "message": "engine went away",
                    "type": "api_error",
                    "param": None,
                    "code": "engine_error",
                }
            },
        ),
        SSEEvent(None, "[DONE]"),
    ]
    client = sdk_client(sse_bytes(sse))
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    seen: list[str] = []

    async def read_all() -> None:
        async for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "")  # noqa: PERF401

    with pytest.raises(openai.APIError, match="engine went away"):
        await read_all()
    assert "".join(seen) == "partial"
