"""OpenAI Chat Completions protocol: request conversion, bodies, chunks, and the official SDK."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import httpx2
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from rltap.canonical import canonical_message
from rltap.chat.parsed import (
    ContentDelta,
    Delta,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
    fold_deltas,
)
from rltap.errors import EngineError, InvalidRequest, RltapError
from rltap.generation import (
    CanonicalRequest,
    FinishReason,
    Generation,
    GenerationDelta,
    GenerationEnd,
    GenerationStart,
    StreamEvent,
)
from rltap.protocols import openai_chat as proto
from rltap.sse import SSEEvent
from rltap.types import ModelResponse, StopReason

USER = {"role": "user", "content": "hi"}
SYSTEM_MESSAGE = {"role": "system", "content": "Be brief."}
PROMPT_LEN = 7
CREATED = 1_700_000_000.75


# --- hand-made generations -------------------------------------------------------------------


@dataclass
class Scenario:
    """A reply as the parser released it: one list of deltas per engine chunk of 2 tokens."""

    steps: list[list[Delta]]
    finish: FinishReason


SCENARIOS = [
    pytest.param(
        Scenario(
            [[ContentDelta("Hel")], [ContentDelta("lo")], [ContentDelta(" world")], []], "stop"
        ),
        id="text",
    ),
    pytest.param(
        Scenario(
            [[ReasoningDelta("think")], [], [ReasoningDelta(" more")], [ContentDelta("42")]],
            "stop",
        ),
        id="reasoning-text",
    ),
    pytest.param(
        Scenario(
            [
                [ToolCallStartDelta(0, "call_a", "get_weather")],
                [ToolCallArgumentsDelta(0, '{"city": ')],
                [ToolCallArgumentsDelta(0, '"Paris"}')],
                [],
            ],
            "tool_calls",
        ),
        id="tool-call",
    ),
    pytest.param(
        Scenario(
            [
                [ReasoningDelta("two calls"), ContentDelta("Let me "), ContentDelta("check.")],
                [ToolCallStartDelta(0, "call_a", "get_weather")],
                [ToolCallArgumentsDelta(0, '{"city": "Paris"}')],
                [ToolCallStartDelta(1, "call_b", "get_time"), ToolCallArgumentsDelta(1, "{}")],
            ],
            "tool_calls",
        ),
        id="text-two-tool-calls",
    ),
    pytest.param(Scenario([[ContentDelta("cut")], [ContentDelta(" off")]], "length"), id="length"),
]


def output_message(deltas: list[Delta]) -> dict[str, Any]:
    """The canonical assistant message, as the session builds it."""
    parsed = fold_deltas(deltas)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        message["content"] = parsed.content or None
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in parsed.tool_calls
        ]
    if parsed.reasoning is not None:
        message["reasoning_content"] = parsed.reasoning
    return message


def events_of(scenario: Scenario, index: int = 0) -> list[StreamEvent]:
    """The session's events for one choice: start, one delta per step, end."""
    interaction_id = f"{proto.ID_PREFIX}{index}"
    events: list[StreamEvent] = [
        GenerationStart(
            index=index, interaction_id=interaction_id, prompt_tokens=PROMPT_LEN, created=CREATED
        )
    ]
    all_deltas: list[Delta] = []
    ids: list[int] = []
    for step, deltas in enumerate(scenario.steps):
        tokens = [100 * index + 2 * step, 100 * index + 2 * step + 1]
        ids += tokens
        all_deltas += deltas
        events.append(
            GenerationDelta(
                index=index,
                deltas=deltas,
                token_ids=tokens,
                logprobs=[-0.5 * t for t in tokens],
                token_texts=[f"t{t}" for t in tokens],
            )
        )
    stop = StopReason.LENGTH if scenario.finish == "length" else StopReason.STOP
    response = ModelResponse(
        input_tokens=list(range(PROMPT_LEN)),
        output_tokens=ids,
        output_logprobs=[-0.5 * t for t in ids],
        output_versions=[3] * len(ids),
        stop_reason=stop,
    )
    generation = Generation(
        index=index,
        interaction_id=interaction_id,
        response=response,
        parsed=fold_deltas(all_deltas),
        finish_reason=scenario.finish,
        output_message=output_message(all_deltas),
        token_texts=[f"t{t}" for t in ids],
        created=CREATED,
    )
    events.append(GenerationEnd(generation=generation))
    return events


def generation_of(scenario: Scenario, index: int = 0) -> Generation:
    end = events_of(scenario, index)[-1]
    assert isinstance(end, GenerationEnd)
    return end.generation


def request(**overrides: Any) -> CanonicalRequest:
    return proto.parse_request({"model": "m", "messages": [USER], **overrides})


def sse_bytes(events: list[SSEEvent]) -> bytes:
    """SSE text as `rltap.sse` writes it."""
    out = b""
    for event in events:
        if event.event is not None:
            out += f"event: {event.event}\n".encode()
        data = event.data.encode() if isinstance(event.data, str) else orjson.dumps(event.data)
        out += b"data: " + data + b"\n\n"
    return out


def encode_all(req: CanonicalRequest, events: list[StreamEvent]) -> list[SSEEvent]:
    encoder = proto.StreamEncoder(req)
    out = [sse for event in events for sse in encoder.encode(event)]
    return out + encoder.finish()


def sdk_client(body: bytes, content_type: str = "text/event-stream") -> openai.AsyncOpenAI:
    async def handler(_: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)

    http_client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return openai.AsyncOpenAI(base_url="http://t/v1", api_key="k", http_client=http_client)


# --- requests ------------------------------------------------------------------------------

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(USER, USER, id="user-string"),
        pytest.param(
            {"role": "user", "content": [{"type": "text", "text": "a"}, IMAGE]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, IMAGE]},
            id="user-parts-image-passes-through",
        ),
        pytest.param(
            {"role": "user", "content": "x", "name": "bob"},
            {"role": "user", "content": "x", "name": "bob"},
            id="name-kept",
        ),
        pytest.param(
            {"role": "developer", "content": "rules"},
            {"role": "system", "content": "rules"},
            id="developer-is-system",
        ),
        pytest.param(
            {"role": "system", "content": [{"type": "text", "text": "s", "cache_control": None}]},
            {"role": "system", "content": [{"type": "text", "text": "s"}]},
            id="system-text-part-normalised",
        ),
        pytest.param(
            {"role": "assistant", "content": None, "tool_calls": [CALL], "refusal": None},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            id="assistant-null-content-tool-calls",
        ),
        pytest.param(
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            id="assistant-empty-content-tool-calls",
        ),
        pytest.param(
            {
                "role": "assistant",
                "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{**CALL, "function": {"name": "f", "arguments": '{"a":1}'}}],
            },
            id="assistant-object-arguments-serialised",
        ),
        pytest.param(
            {"role": "assistant", "content": "ok", "reasoning_content": "r"},
            {"role": "assistant", "content": "ok", "reasoning_content": "r"},
            id="assistant-reasoning-content",
        ),
        pytest.param(
            {"role": "assistant", "content": "ok", "reasoning": "r"},
            {"role": "assistant", "content": "ok", "reasoning_content": "r"},
            id="assistant-vllm-reasoning-alias",
        ),
        pytest.param(
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            id="tool-result",
        ),
        pytest.param(
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "s"}]},
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "s"}]},
            id="tool-result-parts",
        ),
        # Plain messages skip validation; these take the validated path and must agree.
        pytest.param(
            {"role": "user", "content": "x", "audio": None, "x-trace": "t"},
            {"role": "user", "content": "x"},
            id="unknown-keys-dropped",
        ),
        pytest.param(
            {"role": "assistant", "content": "x", "tool_calls": None},
            {"role": "assistant", "content": "x"},
            id="assistant-null-tool-calls-dropped",
        ),
        pytest.param(
            {"role": "system", "content": "x", "name": None},
            {"role": "system", "content": "x"},
            id="null-name-dropped",
        ),
    ],
)
def test_message_forms(message: dict[str, Any], expected: dict[str, Any]) -> None:
    assert proto.parse_request({"messages": [message]}).messages == [expected]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({}, {"model": "m", "max_tokens": None, "n": 1, "stop": []}, id="defaults"),
        pytest.param({"model": None}, {"model": ""}, id="model-null-lenient"),
        pytest.param({"max_tokens": 5}, {"max_tokens": 5}, id="max-tokens"),
        pytest.param(
            {"max_tokens": 5, "max_completion_tokens": 9},
            {"max_tokens": 9},
            id="max-completion-wins",
        ),
        pytest.param(
            {"temperature": 0, "top_p": 0.5, "top_k": 20, "seed": 3, "n": 2},
            {"temperature": 0.0, "top_p": 0.5, "top_k": 20, "seed": 3, "n": 2},
            id="sampling",
        ),
        pytest.param({"top_k": -1}, {"top_k": None}, id="top-k-minus-one-disables"),
        pytest.param({"stop": "END"}, {"stop": ["END"]}, id="stop-string"),
        pytest.param({"stop": ["a", "", "b"]}, {"stop": ["a", "b"]}, id="stop-list-empty-dropped"),
        pytest.param(
            {"logprobs": True, "top_logprobs": 2},
            {"logprobs": True, "top_logprobs": 2},
            id="logprobs",
        ),
        pytest.param(
            {"stream": True, "stream_options": {"include_usage": True}},
            {"stream": True, "include_usage": True},
            id="stream-usage",
        ),
        pytest.param(
            {"stream_options": {"include_usage": True}},
            {"stream": False, "include_usage": False},
            id="stream-options-without-stream-ignored",
        ),
        pytest.param(
            {"chat_template_kwargs": {"enable_thinking": False}},
            {"template_kwargs": {"enable_thinking": False}},
            id="chat-template-kwargs",
        ),
        pytest.param(
            {"tools": [TOOL], "tool_choice": "required", "parallel_tool_calls": False},
            {"tools": [TOOL], "tool_choice": "required", "parallel_tool_calls": False},
            id="tools-required",
        ),
        pytest.param(
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}},
            {"tool_choice": {"name": "f"}, "parallel_tool_calls": True},
            id="tool-choice-named",
        ),
        pytest.param({"tool_choice": "none"}, {"tool_choice": "none", "tools": None}, id="none"),
        pytest.param({"tools": []}, {"tools": None, "tool_choice": None}, id="empty-tools"),
        pytest.param(
            {"frequency_penalty": 0.1, "response_format": {"type": "text"}, "user": "u"},
            {"model": "m"},
            id="unknown-fields-ignored",
        ),
    ],
)
def test_request_fields(body: dict[str, Any], expected: dict[str, Any]) -> None:
    req = proto.parse_request({"model": "m", "messages": [USER], **body})
    assert req.api == "chat"
    assert {key: getattr(req, key) for key in expected} == expected


def test_body_is_not_mutated() -> None:
    body = {
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "s", "x": 1}]},
            {
                "role": "assistant",
                "reasoning": "r",
                "name": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
        ]
    }
    before = json.loads(json.dumps(body))
    proto.parse_request(body)
    assert body == before


def test_a_long_history_of_plain_messages_is_checked_message_by_message() -> None:
    history = [USER, {"role": "assistant", "content": "a"}] * 50
    bad = [*history, {"role": "user", "content": 5}]
    with pytest.raises(InvalidRequest) as info:
        proto.parse_request({"messages": bad})
    assert info.value.param == "messages[100].content"
    assert proto.parse_request({"messages": history}).messages == history


def test_missing_model_defaults_to_empty() -> None:
    assert proto.parse_request({"messages": [USER]}).model == ""


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"model": "m"}, "messages", id="no-messages"),
        pytest.param({"messages": []}, "messages", id="empty-messages"),
        pytest.param({"messages": "hi"}, "messages", id="messages-not-list"),
        pytest.param({"messages": [{"content": "x"}]}, "messages[0].role", id="no-role"),
        pytest.param(
            {"messages": [{"role": "function", "content": "x"}]}, "messages[0].role", id="role"
        ),
        pytest.param({"messages": [{"role": "user"}]}, "messages[0].content", id="user-no-content"),
        pytest.param(
            {"messages": [{"role": "user", "content": 5}]}, "messages[0].content", id="content-int"
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": [{"text": "x"}]}]},
            "messages[0].content[0].type",
            id="part-no-type",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
            id="text-part-no-text",
        ),
        pytest.param(
            {"messages": [USER, {"role": "tool", "content": "x"}]},
            "messages[1].tool_call_id",
            id="tool-no-call-id",
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [{"type": "function", "function": {"name": "f"}}],
                    }
                ]
            },
            "messages[0].tool_calls[0].id",
            id="tool-call-no-id",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": "x", "tool_calls": [CALL]}]},
            "messages[0].tool_calls",
            id="tool-calls-on-user",
        ),
        pytest.param({"messages": [USER], "temperature": -0.1}, "temperature", id="temperature"),
        pytest.param(
            {"messages": [USER], "temperature": "hot"}, "temperature", id="temperature-type"
        ),
        pytest.param({"messages": [USER], "top_p": 0}, "top_p", id="top-p-zero"),
        pytest.param({"messages": [USER], "top_p": 1.5}, "top_p", id="top-p-above-one"),
        pytest.param({"messages": [USER], "top_k": -2}, "top_k", id="top-k"),
        pytest.param({"messages": [USER], "max_tokens": 0}, "max_tokens", id="max-tokens"),
        pytest.param(
            {"messages": [USER], "max_completion_tokens": 0},
            "max_completion_tokens",
            id="max-compl",
        ),
        pytest.param({"messages": [USER], "n": 0}, "n", id="n-zero"),
        pytest.param({"messages": [USER], "stop": 3}, "stop", id="stop-type"),
        pytest.param(
            {"messages": [USER], "top_logprobs": 21, "logprobs": True}, "top_logprobs", id="top-lp"
        ),
        pytest.param({"messages": [USER], "top_logprobs": 2}, "top_logprobs", id="top-lp-no-lp"),
        pytest.param({"messages": [USER], "tool_choice": "any"}, "tool_choice", id="tool-choice"),
        pytest.param(
            {"messages": [USER], "tool_choice": "required"}, "tool_choice", id="required-no-tools"
        ),
        pytest.param(
            {
                "messages": [USER],
                "tools": [TOOL],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "tool_choice.function.name",
            id="named-unknown",
        ),
        pytest.param(
            {"messages": [USER], "tools": [{"type": "custom"}]}, "tools[0].type", id="tool-type"
        ),
        pytest.param(
            {"messages": [USER], "tools": [{"type": "function", "function": {}}]},
            "tools[0].function.name",
            id="tool-no-name",
        ),
    ],
)
def test_invalid_request(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        proto.parse_request(body)
    assert info.value.param == param
    assert info.value.status_code == 400
    assert param in info.value.message


def test_non_mapping_body() -> None:
    with pytest.raises(InvalidRequest):
        proto.parse_request([USER])  # type: ignore[arg-type]


# --- non-streaming bodies --------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_build_response_validates(scenario: Scenario) -> None:
    generation = generation_of(scenario)
    body = proto.build_response(request(), [generation])
    completion = ChatCompletion.model_validate(body)
    message = completion.choices[0].message
    expected = generation.output_message
    assert completion.id == generation.interaction_id
    assert completion.created == int(CREATED)
    assert completion.model == "m"
    assert message.content == expected["content"]
    assert [c.model_dump() for c in message.tool_calls or []] == expected.get("tool_calls", [])
    assert body["choices"][0]["message"].get("reasoning_content") == expected.get(
        "reasoning_content"
    )
    assert completion.choices[0].finish_reason == scenario.finish
    assert completion.choices[0].logprobs is None
    assert completion.usage is not None
    assert completion.usage.model_dump(exclude_none=True) == {
        "prompt_tokens": PROMPT_LEN,
        "completion_tokens": 2 * len(scenario.steps),
        "total_tokens": PROMPT_LEN + 2 * len(scenario.steps),
    }


def test_abort_is_length() -> None:
    generation = generation_of(Scenario([[ContentDelta("par")]], "abort"))
    body = proto.build_response(request(), [generation])
    assert ChatCompletion.model_validate(body).choices[0].finish_reason == "length"


@pytest.mark.parametrize("top", [pytest.param(None, id="no-top"), pytest.param(3, id="top-3")])
def test_response_logprobs(top: int | None) -> None:
    generation = generation_of(Scenario([[ContentDelta("a")], [ContentDelta("é")]], "stop"))
    overrides: dict[str, Any] = {"logprobs": True} | ({"top_logprobs": top} if top else {})
    body = proto.build_response(request(**overrides), [generation])
    logprobs = ChatCompletion.model_validate(body).choices[0].logprobs
    assert logprobs is not None
    content = logprobs.content or []
    assert [e.token for e in content] == ["t0", "t1", "t2", "t3"]
    assert [e.logprob for e in content] == [0.0, -0.5, -1.0, -1.5]
    assert content[0].bytes == list(b"t0")
    sampled_only = [[(t.token, t.logprob) for t in e.top_logprobs] for e in content]
    assert sampled_only == ([[(e.token, e.logprob)] for e in content] if top else [[]] * 4)


def test_response_logprob_fallbacks() -> None:
    generation = generation_of(Scenario([[ContentDelta("a")]], "stop"))
    generation.token_texts = []
    generation.response.output_logprobs[1] = float("-inf")
    body = proto.build_response(request(logprobs=True), [generation])
    content = body["choices"][0]["logprobs"]["content"]
    assert [(e["token"], e["logprob"]) for e in content] == [
        ("token_id:0", 0.0),
        ("token_id:1", -9999.0),
    ]


def test_response_n_choices() -> None:
    scenarios = [
        Scenario([[ContentDelta("a")]], "stop"),
        Scenario([[ContentDelta("b")]] * 2, "length"),
    ]
    generations = [generation_of(s, i) for i, s in enumerate(scenarios)]
    body = proto.build_response(request(n=2), generations[::-1])
    completion = ChatCompletion.model_validate(body)
    assert completion.id == generations[0].interaction_id
    assert [c.message.content for c in completion.choices] == ["a", "bb"]
    assert [c.finish_reason for c in completion.choices] == ["stop", "length"]
    assert [c["interaction_id"] for c in body["choices"]] == [g.interaction_id for g in generations]
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (PROMPT_LEN, 6)


def test_single_choice_has_no_interaction_id_extension() -> None:
    body = proto.build_response(request(), [generation_of(Scenario([[ContentDelta("a")]], "stop"))])
    assert "interaction_id" not in body["choices"][0]


async def test_sdk_create_reads_body() -> None:
    generation = generation_of(Scenario([[ContentDelta("hello")]], "stop"))
    body = orjson.dumps(proto.build_response(request(), [generation]))
    client = sdk_client(body, "application/json")
    completion = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "hello"


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(InvalidRequest("bad temperature", param="temperature"), id="invalid"),
        pytest.param(EngineError("engine down"), id="engine"),
    ],
)
def test_error_body(exc: RltapError) -> None:
    body = proto.error_body(exc)
    assert body == {
        "error": {
            "message": exc.message,
            "type": exc.error_type,
            "param": exc.param,
            "code": exc.code,
        }
    }


# --- streaming -------------------------------------------------------------------------------


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


# --- round trip ------------------------------------------------------------------------------


def _client_history(message: dict[str, Any], reserialise: bool) -> list[dict[str, Any]]:
    """What an agent sends next: the reply as the SDK gave it, then one result per tool call."""
    if reserialise:  # e.g. LangChain: content "" instead of null, arguments re-dumped with spaces
        message = {**message, "content": message["content"] or ""}
        message["tool_calls"] = [
            {
                **c,
                "function": {
                    **c["function"],
                    "arguments": json.dumps(json.loads(c["function"]["arguments"])),
                },
            }
            for c in message.get("tool_calls") or []
        ] or None
    results = [
        {"role": "tool", "tool_call_id": c["id"], "content": f"result of {c['function']['name']}"}
        for c in message.get("tool_calls") or []
    ]
    return [USER, message, *results]


@pytest.mark.parametrize(
    "reserialise", [pytest.param(False, id="as-sent"), pytest.param(True, id="reserialised")]
)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_round_trip(scenario: Scenario, reserialise: bool) -> None:
    generation = generation_of(scenario)
    completion = ChatCompletion.model_validate(proto.build_response(request(), [generation]))
    sent_back = completion.choices[0].message.model_dump()
    history = _client_history(sent_back, reserialise)
    messages = proto.parse_request({"model": "m", "messages": history}).messages
    calls = generation.output_message.get("tool_calls", [])
    assert len(messages) == 2 + len(calls)
    assert canonical_message(messages[1]) == canonical_message(generation.output_message)
    assert messages[1].get("reasoning_content") == generation.output_message.get(
        "reasoning_content"
    )
    assert [m["tool_call_id"] for m in messages[2:]] == [c["id"] for c in calls]


def test_exports() -> None:
    assert sorted(proto.__all__) == sorted(
        [
            "ID_PREFIX",
            "SPEC",
            "ChatCompletionRequest",
            "StreamEncoder",
            "build_response",
            "error_body",
            "parse_request",
        ]
    )
    assert proto.ID_PREFIX == "chatcmpl-"
