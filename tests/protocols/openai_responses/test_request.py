"""The OpenAI Responses protocol: request conversion, bodies, events, the SDK's own view of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx2
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from rltap.canonical import canonical_message
from rltap.chat.parsed import (
    ContentDelta,
    Delta,
    ParsedOutput,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
)
from rltap.errors import CapacityExhausted, EngineError, InvalidRequest, RltapError
from rltap.generation import (
    CanonicalRequest,
    FinishReason,
    Generation,
    GenerationDelta,
    GenerationEnd,
    GenerationStart,
    StreamEvent,
)
from rltap.protocols import openai_responses as proto
from rltap.sse import SSEEvent
from rltap.types import ModelResponse, StopReason

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}
CREATED = 1_700_000_000.0


def test_exports() -> None:
    expected = [
        "ID_PREFIX",
        "SPEC",
        "ResponsesRequest",
        "StreamEncoder",
        "build_response",
        "error_body",
        "parse_request",
    ]
    assert sorted(proto.__all__) == sorted(expected)
    assert proto.ID_PREFIX == "resp_"


# --- request conversion ------------------------------------------------------------------------

USER = {"role": "user", "content": "Weather in Paris?"}
CALL_A = {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": '{"x": 1}'}
CALL_B = {"type": "function_call", "call_id": "call_b", "name": "g", "arguments": "{}"}
TOOL_CALL_A = {
    "id": "call_a",
    "type": "function",
    "function": {"name": "f", "arguments": '{"x": 1}'},
}
TOOL_CALL_B = {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "think"}],
}


@pytest.mark.parametrize(
    ("body", "messages"),
    [
        pytest.param({"input": "hi"}, [{"role": "user", "content": "hi"}], id="string-input"),
        pytest.param(
            {"input": "hi", "instructions": "Be brief."},
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            id="instructions",
        ),
        pytest.param(
            {"input": [{"role": "developer", "content": "d"}, {"role": "system", "content": "s"}]},
            [{"role": "system", "content": "d"}, {"role": "system", "content": "s"}],
            id="developer-and-system",
        ),
        pytest.param(
            {
                "input": [
                    {
                        "type": "message",
                        "role": "user",
                        "id": "m1",
                        "status": "completed",
                        "content": [
                            {"type": "input_text", "text": "a"},
                            {"type": "input_image", "image_url": "data:x", "detail": "auto"},
                            {"type": "output_text", "text": "b", "annotations": []},
                        ],
                    }
                ]
            },
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a"},
                        {"type": "input_image", "image_url": "data:x", "detail": "auto"},
                        {"type": "text", "text": "b"},
                    ],
                }
            ],
            id="content-parts",
        ),
        pytest.param(
            {
                "input": [
                    USER,
                    {
                        "type": "message",
                        "role": "assistant",
                        "id": "msg_1",
                        "status": "completed",
                        "content": [
                            {
                                "type": "output_text",
                                "text": "Sunny.",
                                "annotations": [],
                                "logprobs": [],
                            }
                        ],
                    },
                ]
            },
            [USER, {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]}],
            id="assistant-output-message",
        ),
        pytest.param(
            {
                "input": [
                    USER,
                    {"role": "assistant", "content": "Checking."},
                    CALL_A,
                    CALL_B,
                    {"type": "function_call_output", "call_id": "call_a", "output": "1"},
                    {"type": "function_call_output", "call_id": "call_b", "output": "2"},
                ]
            },
            [
                USER,
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [TOOL_CALL_A, TOOL_CALL_B],
                },
                {"role": "tool", "tool_call_id": "call_a", "content": "1"},
                {"role": "tool", "tool_call_id": "call_b", "content": "2"},
            ],
            id="calls-join-assistant-message",
        ),
        pytest.param(
            {"input": [USER, CALL_A, CALL_B]},
            [
                USER,
                {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL_A, TOOL_CALL_B]},
            ],
            id="calls-without-text",
        ),
        pytest.param(
            {"input": [USER, CALL_A, {"role": "assistant", "content": "Done."}]},
            [USER, {"role": "assistant", "content": "Done.", "tool_calls": [TOOL_CALL_A]}],
            id="text-after-calls-same-turn",
        ),
        pytest.param(
            {"input": [USER, REASONING, {"role": "assistant", "content": "Hi."}]},
            [USER, {"role": "assistant", "content": "Hi.", "reasoning_content": "think"}],
            id="reasoning-then-message",
        ),
        pytest.param(
            {"input": [USER, REASONING, CALL_A]},
            [
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "think",
                    "tool_calls": [TOOL_CALL_A],
                },
            ],
            id="reasoning-then-call",
        ),
        pytest.param(
            {
                "input": [
                    USER,
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "sum"}]},
                    {"role": "user", "content": "go on"},
                ]
            },
            [
                USER,
                {"role": "assistant", "content": None, "reasoning_content": "sum"},
                {"role": "user", "content": "go on"},
            ],
            id="dangling-reasoning-from-summary",
        ),
        pytest.param(
            {
                "input": [
                    USER,
                    {"role": "assistant", "content": "a"},
                    {"role": "assistant", "content": "b"},
                ]
            },
            [USER, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}],
            id="two-assistant-messages-stay-two",
        ),
        pytest.param(
            {
                "input": [
                    USER,
                    CALL_A,
                    {
                        "type": "function_call_output",
                        "call_id": "call_a",
                        "output": [{"type": "input_text", "text": "r"}],
                    },
                ]
            },
            [
                USER,
                {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL_A]},
                {
                    "role": "tool",
                    "tool_call_id": "call_a",
                    "content": [{"type": "text", "text": "r"}],
                },
            ],
            id="function-call-output-parts",
        ),
    ],
)
def test_input_becomes_canonical_messages(
    body: dict[str, Any], messages: list[dict[str, Any]]
) -> None:
    assert proto.parse_request({"model": "m", **body}).messages == messages


def test_request_options() -> None:
    request = proto.parse_request(
        {
            "model": "qwen",
            "input": "hi",
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "max_output_tokens": 64,
            "temperature": 0.5,
            "top_p": 0.9,
            "top_k": 20,
            "seed": 7,
            "stream": True,
            "store": False,
            "previous_response_id": "resp_prev",
            "metadata": {"run": "1"},
            "reasoning": {"effort": "none"},
            "include": ["message.output_text.logprobs"],
            "top_logprobs": 2,
            "text": {"format": {"type": "text"}},
            "some_future_field": {"x": 1},
        }
    )
    assert request.api == "responses"
    assert request.model == "qwen"
    assert request.tools == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": WEATHER_TOOL["parameters"],
                "strict": True,
            },
        }
    ]
    assert request.tool_choice == {"name": "get_weather"}
    assert request.parallel_tool_calls is False
    assert (request.max_tokens, request.temperature, request.top_p) == (64, 0.5, 0.9)
    assert (request.top_k, request.seed, request.n) == (20, 7, 1)
    assert request.stream
    assert request.include_usage
    assert request.previous_response_id == "resp_prev"
    assert request.metadata == {"run": "1"}
    assert request.template_kwargs == {"enable_thinking": False}
    assert (request.logprobs, request.top_logprobs) == (True, 2)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param({}, {}, id="no-reasoning"),
        pytest.param({"reasoning": {"effort": "low"}}, {"enable_thinking": True}, id="effort-low"),
        pytest.param({"reasoning": {"effort": "none"}}, {"enable_thinking": False}, id="none"),
        pytest.param(
            {"reasoning": {"effort": "high"}, "chat_template_kwargs": {"enable_thinking": False}},
            {"enable_thinking": False},
            id="chat-template-kwargs-win",
        ),
    ],
)
def test_reasoning_effort_sets_thinking(extra: dict[str, Any], expected: dict[str, Any]) -> None:
    assert proto.parse_request({"input": "hi", **extra}).template_kwargs == expected


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        pytest.param("auto", "auto", id="auto"),
        pytest.param("none", "none", id="none"),
        pytest.param("required", "required", id="required"),
        pytest.param({"type": "function", "name": "get_weather"}, {"name": "get_weather"}, id="fn"),
    ],
)
def test_tool_choice(choice: Any, expected: Any) -> None:
    body = {"input": "hi", "tools": [WEATHER_TOOL], "tool_choice": choice}
    assert proto.parse_request(body).tool_choice == expected


def test_previous_response_id_without_input() -> None:
    request = proto.parse_request({"model": "m", "previous_response_id": "resp_1"})
    assert request.messages == []
    assert request.previous_response_id == "resp_1"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"input": []}, "input", id="empty-input"),
        pytest.param({"model": "m"}, "input", id="no-input"),
        pytest.param({"input": 5}, "input", id="input-number"),
        pytest.param({"input": "x", "temperature": -0.1}, "temperature", id="temperature"),
        pytest.param({"input": "x", "temperature": "hot"}, "temperature", id="temperature-type"),
        pytest.param({"input": "x", "top_p": 0}, "top_p", id="top-p"),
        pytest.param({"input": "x", "max_output_tokens": 0}, "max_output_tokens", id="max-tokens"),
        pytest.param({"input": "x", "top_logprobs": 21}, "top_logprobs", id="top-logprobs"),
        pytest.param({"input": "x", "stream": "maybe"}, "stream", id="stream"),
        pytest.param({"input": "x", "metadata": {"k": 1}}, "metadata.k", id="metadata"),
        pytest.param({"input": [3]}, "input[0]", id="item-not-object"),
        pytest.param({"input": [{"type": "web_search_call"}]}, "input[0].type", id="hosted-item"),
        pytest.param({"input": [{"type": []}]}, "input[0].type", id="item-type-not-a-string"),
        pytest.param({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type", id="ref"),
        pytest.param({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", id="role"),
        pytest.param({"input": [{"role": "user"}]}, "input[0].content", id="no-content"),
        pytest.param(
            {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
            id="text-part-without-text",
        ),
        pytest.param(
            {"input": [USER, {"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[1].call_id",
            id="call-without-call-id",
        ),
        pytest.param(
            {"input": [{"type": "function_call_output", "call_id": "c"}]},
            "input[0].output",
            id="output-missing",
        ),
        pytest.param({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type", id="tool"),
        pytest.param(
            {"input": "x", "tools": [{"type": "function"}]}, "tools[0].name", id="nameless"
        ),
        pytest.param(
            {
                "input": "x",
                "tools": [WEATHER_TOOL],
                "tool_choice": {"type": "function", "name": "z"},
            },
            "tool_choice.name",
            id="tool-choice-unknown-function",
        ),
        pytest.param(
            {"input": "x", "tool_choice": "required"}, "tool_choice", id="required-no-tools"
        ),
        pytest.param({"input": "x", "tool_choice": "any"}, "tool_choice", id="tool-choice-value"),
        pytest.param(
            {"input": "x", "tools": [WEATHER_TOOL], "tool_choice": {"type": "web_search_preview"}},
            "tool_choice.type",
            id="tool-choice-hosted",
        ),
        pytest.param({"input": "x", "conversation": "conv_1"}, "conversation", id="conversation"),
        pytest.param({"input": "x", "background": True}, "background", id="background"),
    ],
)
def test_invalid_bodies(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        proto.parse_request(body)
    assert info.value.param == param
    assert info.value.status_code == 400


def test_body_must_be_an_object() -> None:
    with pytest.raises(InvalidRequest):
        proto.parse_request(["not", "a", "dict"])  # type: ignore[arg-type]


# --- hand-made generations ---------------------------------------------------------------------


def make_generation(
    *,
    content: str = "",
    reasoning: str | None = None,
    calls: Sequence[tuple[str, str, str]] = (),
    finish: FinishReason = "stop",
    interaction_id: str = "resp_0123abcd",
    n_out: int = 6,
) -> Generation:
    stop = {"length": StopReason.LENGTH, "abort": StopReason.ABORT}.get(finish, StopReason.STOP)
    response = ModelResponse(
        input_tokens=[1, 2, 3, 4, 5],
        output_tokens=list(range(10, 10 + n_out)),
        output_logprobs=[-0.25] * n_out,
        output_versions=[3] * n_out,
        stop_reason=stop,
        latency=0.5,
    )
    tool_calls = [ParsedToolCall(id=c, name=n, arguments=a) for c, n, a in calls]
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in tool_calls
        ]
    if reasoning:
        message["reasoning_content"] = reasoning
    return Generation(
        index=0,
        interaction_id=interaction_id,
        response=response,
        parsed=ParsedOutput(content=content, reasoning=reasoning, tool_calls=tool_calls),
        finish_reason=finish,
        output_message=message,
        token_texts=[f"t{i}" for i in range(n_out)],
        created=CREATED,
    )


CASES: dict[str, dict[str, Any]] = {
    "text": {"content": "It is sunny in Paris."},
    "reasoning-text": {"reasoning": "The user wants weather.", "content": "Sunny."},
    "tool-call": {
        "calls": [("call_1", "get_weather", '{"city": "Paris"}')],
        "finish": "tool_calls",
    },
    "text-reasoning-two-calls": {
        "reasoning": "Two cities.",
        "content": "Let me check both.",
        "calls": [("call_1", "get_weather", '{"city": "Paris"}'), ("call_2", "f", "{}")],
        "finish": "tool_calls",
    },
    "length": {"content": "It is sunny and", "finish": "length"},
    "length-in-reasoning": {"reasoning": "Hmm, let me", "finish": "length"},
    "empty": {},
    "abort": {"content": "Sun", "finish": "abort"},
}
CASE_PARAMS = [pytest.param(kwargs, id=name) for name, kwargs in CASES.items()]


def request_for(**overrides: Any) -> CanonicalRequest:
    body = {"model": "qwen", "input": "Weather in Paris?", "tools": [WEATHER_TOOL], **overrides}
    return proto.parse_request(body)


@pytest.mark.parametrize("kwargs", CASE_PARAMS)
def test_build_response_is_a_valid_sdk_response(kwargs: dict[str, Any]) -> None:
    generation = make_generation(**kwargs)
    body = proto.build_response(request_for(), [generation])
    response = Response.model_validate(body)
    assert response.id == generation.interaction_id
    assert response.object == "response"
    assert response.output_text == kwargs.get("content", "")
    calls = [(i.call_id, i.name, i.arguments) for i in response.output if i.type == "function_call"]
    assert calls == list(kwargs.get("calls", []))
    reasoning = [i for i in response.output if i.type == "reasoning"]
    assert [r.content[0].text for r in reasoning if r.content] == (
        [kwargs["reasoning"]] if "reasoning" in kwargs else []
    )
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (5, 6)
    assert response.usage.total_tokens == 11
    assert response.tools[0].type == "function"


@pytest.mark.parametrize(
    ("finish", "status", "details"),
    [
        pytest.param("stop", "completed", None, id="stop"),
        pytest.param("tool_calls", "completed", None, id="tool-calls"),
        pytest.param("length", "incomplete", {"reason": "max_output_tokens"}, id="length"),
        pytest.param("abort", "cancelled", None, id="abort"),
    ],
)
def test_status(finish: FinishReason, status: str, details: Any) -> None:
    body = proto.build_response(request_for(), [make_generation(content="x", finish=finish)])
    assert (body["status"], body["incomplete_details"]) == (status, details)
    assert body["output"][0]["status"] == ("completed" if status == "completed" else "incomplete")


def test_output_items_order_and_ids() -> None:
    generation = make_generation(**CASES["text-reasoning-two-calls"])
    output = proto.build_response(request_for(), [generation])["output"]
    assert [(i["type"], i["id"]) for i in output] == [
        ("reasoning", "rs_0123abcd_0"),
        ("message", "msg_0123abcd_1"),
        ("function_call", "fc_0123abcd_2"),
        ("function_call", "fc_0123abcd_3"),
    ]
    assert output[1]["content"] == [
        {"type": "output_text", "text": "Let me check both.", "annotations": [], "logprobs": []}
    ]


def test_echoed_request_fields() -> None:
    request = request_for(
        tool_choice="required", temperature=0.3, max_output_tokens=9, metadata={"a": "b"}
    )
    response = Response.model_validate(proto.build_response(request, [make_generation()]))
    assert response.tool_choice == "required"
    assert (response.temperature, response.max_output_tokens) == (0.3, 9)
    assert response.metadata == {"a": "b"}
    assert response.tools[0].name == "get_weather"  # type: ignore[union-attr]


def test_logprobs_on_request() -> None:
    request = request_for(include=["message.output_text.logprobs"])
    body = proto.build_response(request, [make_generation(content="Hi", n_out=2)])
    message = Response.model_validate(body).output[0]
    assert message.type == "message"
    part = message.content[0]
    assert part.type == "output_text"
    assert part.logprobs is not None
    assert [(lp.token, lp.logprob) for lp in part.logprobs] == [("t0", -0.25), ("t1", -0.25)]


@pytest.mark.parametrize(
    ("exc", "status", "type_", "code"),
    [
        pytest.param(
            InvalidRequest("bad", param="input"), 400, "invalid_request_error", None, id="invalid"
        ),
        pytest.param(CapacityExhausted("busy"), 429, "rate_limit_error", None, id="capacity"),
        pytest.param(EngineError("down"), 502, "api_error", "engine_error", id="engine"),
    ],
)
async def test_error_body_through_sdk(
    exc: RltapError, status: int, type_: str, code: str | None
) -> None:
    body = proto.error_body(exc)
    assert body == {
        "error": {"message": exc.message, "type": type_, "param": exc.param, "code": code}
    }
    client = sdk_client(lambda _: httpx2.Response(status, json=body), max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        await client.responses.create(model="m", input="hi")
    assert (info.value.status_code, info.value.param, info.value.code) == (status, exc.param, code)


# --- streaming ---------------------------------------------------------------------------------


def split(text: str, pieces: int = 2) -> list[str]:
    cut = max(1, len(text) // pieces)
    return [text[i : i + cut] for i in range(0, len(text), cut)]


def stream_events(generation: Generation) -> list[StreamEvent]:
    """The session's events for a generation: reasoning, text, then calls, in small pieces."""
    deltas: list[Delta] = []
    message = generation.output_message
    deltas += [ReasoningDelta(p) for p in split(message.get("reasoning_content") or "")]
    deltas += [ContentDelta(p) for p in split(message.get("content") or "")]
    for i, call in enumerate(message.get("tool_calls") or []):
        deltas.append(ToolCallStartDelta(i, call["id"], call["function"]["name"]))
        deltas += [ToolCallArgumentsDelta(i, p) for p in split(call["function"]["arguments"])]
    start = GenerationStart(
        index=0, interaction_id=generation.interaction_id, prompt_tokens=5, created=CREATED
    )
    chunks = [GenerationDelta(index=0, deltas=[d]) for d in deltas]
    return [
        start,
        GenerationDelta(index=0, deltas=[]),
        *chunks,
        GenerationEnd(generation=generation),
    ]


def encode_all(request: CanonicalRequest, events: Sequence[StreamEvent]) -> list[SSEEvent]:
    encoder = proto.StreamEncoder(request)
    out = [sse for event in events for sse in encoder.encode(event)]
    return out + encoder.finish()


def check_events(sses: Sequence[SSEEvent]) -> list[Any]:
    """Every event is a valid SDK event named by its type, numbered 0, 1, 2, ..."""
    parsed = []
    for number, sse in enumerate(sses):
        assert isinstance(sse.data, dict)
        assert sse.event == sse.data["type"]
        assert sse.data["sequence_number"] == number
        parsed.append(EVENT_ADAPTER.validate_python(sse.data))
    return parsed


def sse_bytes(sses: Sequence[SSEEvent]) -> bytes:
    out = bytearray()
    for sse in sses:
        if sse.event is not None:
            out += f"event: {sse.event}\n".encode()
        data = sse.data if isinstance(sse.data, str) else orjson.dumps(sse.data).decode()
        out += f"data: {data}\n\n".encode()
    return bytes(out)


def sdk_client(
    handler: Callable[[httpx2.Request], httpx2.Response], max_retries: int = 2
) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return openai.AsyncOpenAI(
        base_url="http://t/v1", api_key="k", http_client=http, max_retries=max_retries
    )


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


@pytest.mark.parametrize("kwargs", CASE_PARAMS)
def test_stream_final_response_matches_body(kwargs: dict[str, Any]) -> None:
    generation = make_generation(**kwargs)
    request = request_for(stream=True, include=["message.output_text.logprobs"])
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


@pytest.mark.parametrize("kwargs", CASE_PARAMS)
async def test_sdk_stream_accumulator_reconstructs_the_response(kwargs: dict[str, Any]) -> None:
    generation = make_generation(**kwargs)
    request = request_for(stream=True)
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


async def test_sdk_non_stream_body() -> None:
    generation = make_generation(**CASES["text-reasoning-two-calls"])
    body = proto.build_response(request_for(), [generation])
    client = sdk_client(lambda _: httpx2.Response(200, json=body))
    response = await client.responses.create(model="qwen", input="hi")
    assert response.output_text == "Let me check both."
    assert [i.type for i in response.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]


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


# --- round trip: the client re-sends the reply as history ---------------------------------------


def resent_history(output: list[Any]) -> list[dict[str, Any]]:
    """What an SDK client sends next: the question, the reply's items, one output per call."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    items += [item.model_dump(exclude_none=True) for item in output]
    items += [
        {"type": "function_call_output", "call_id": item.call_id, "output": "18C"}
        for item in output
        if item.type == "function_call"
    ]
    return items


@pytest.mark.parametrize("streamed", [pytest.param(False, id="body"), pytest.param(True, id="sse")])
@pytest.mark.parametrize("kwargs", CASE_PARAMS)
def test_round_trip_gives_the_output_message(kwargs: dict[str, Any], streamed: bool) -> None:
    generation = make_generation(**kwargs)
    request = request_for(stream=streamed)
    if streamed:
        body = encode_all(request, stream_events(generation))[-1].data["response"]  # type: ignore[index]
    else:
        body = proto.build_response(request, [generation])
    response = Response.model_validate(body)
    messages = proto.parse_request({"input": resent_history(response.output)}).messages
    assistant = messages[1]
    assert canonical_message(assistant) == canonical_message(generation.output_message)
    assert assistant.get("reasoning_content") == generation.output_message.get("reasoning_content")
    calls = generation.output_message.get("tool_calls") or []
    assert [m["role"] for m in messages] == ["user", "assistant"] + ["tool"] * len(calls)
    assert [m["tool_call_id"] for m in messages[2:]] == [c["id"] for c in calls]
