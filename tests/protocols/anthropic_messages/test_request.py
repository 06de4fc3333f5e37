"""Anthropic Messages protocol: request conversion, Message bodies, SSE streams, error envelopes.

Bodies and events are validated with the `anthropic` SDK's own types, and the SSE text is fed
through the SDK's streaming client (`client.messages.stream`) over `httpx2.MockTransport`, so
the SDK's accumulator must rebuild the same message as the non-streamed body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from anthropic.types import ErrorResponse, Message, RawMessageStreamEvent, UserMessageParam
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
from rltap.errors import (
    AuthenticationError,
    CapacityExhausted,
    Conflict,
    ContextLengthExceeded,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RltapError,
    SessionGone,
)
from rltap.generation import (
    CanonicalRequest,
    FinishReason,
    Generation,
    GenerationDelta,
    GenerationEnd,
    GenerationStart,
    StreamEvent,
)
from rltap.protocols import anthropic_messages
from rltap.protocols.anthropic_messages import (
    ID_PREFIX,
    StreamEncoder,
    build_response,
    error_body,
    parse_request,
)
from rltap.sse import SSEEvent
from rltap.types import ModelResponse, StopReason

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
USER: UserMessageParam = {"role": "user", "content": "Hi"}
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": [USER], **fields}


# --- request conversion ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {},
            [{"role": "user", "content": "Hi"}],
            id="user-string",
        ),
        pytest.param(
            {"system": "Be brief."},
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            id="system-string",
        ),
        pytest.param(
            {"system": [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}}]},
            [{"role": "system", "content": "A"}, {"role": "user", "content": "Hi"}],
            id="system-one-block",
        ),
        pytest.param(
            {"system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
            [
                {
                    "role": "system",
                    "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
                },
                {"role": "user", "content": "Hi"},
            ],
            id="system-blocks",
        ),
        pytest.param({"system": ""}, [{"role": "user", "content": "Hi"}], id="system-empty"),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Hey", "cache_control": {"type": "ephemeral"}}
                        ],
                    }
                ]
            },
            [{"role": "user", "content": "Hey"}],
            id="user-one-text-block",
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is this?"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "iVBO",
                                },
                                "cache_control": {"type": "ephemeral"},
                            },
                        ],
                    }
                ]
            },
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
                        },
                    ],
                }
            ],
            id="user-text-and-image",
        ),
        pytest.param(
            {"messages": [USER, {"role": "assistant", "content": "Hello!"}]},
            [USER, {"role": "assistant", "content": "Hello!"}],
            id="assistant-string",
        ),
        pytest.param(
            {
                "messages": [
                    USER,
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "thinking", "thinking": "Need weather.", "signature": "sig"},
                            {"type": "text", "text": "Checking."},
                            {
                                "type": "tool_use",
                                "id": "toolu_1",
                                "name": "get_weather",
                                "input": {"city": "Paris"},
                            },
                            {
                                "type": "tool_use",
                                "id": "toolu_2",
                                "name": "get_weather",
                                "input": {"city": "Oslo"},
                            },
                        ],
                    },
                ]
            },
            [
                USER,
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        },
                        {
                            "id": "toolu_2",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                        },
                    ],
                    "reasoning_content": "Need weather.",
                },
            ],
            id="assistant-thinking-text-two-tool-uses",
        ),
        pytest.param(
            {
                "messages": [
                    USER,
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "redacted_thinking", "data": "EncRypTed"},
                            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
                        ],
                    },
                ]
            },
            [
                USER,
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
            ],
            id="assistant-redacted-thinking-and-tool-use-only",
        ),
        pytest.param(
            {
                "messages": [
                    USER,
                    {
                        "role": "assistant",
                        "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
                    },
                ]
            },
            [USER, {"role": "assistant", "content": "AB"}],
            id="assistant-text-blocks-joined",
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                            {
                                "type": "tool_result",
                                "tool_use_id": "toolu_2",
                                "content": [
                                    {"type": "text", "text": "-3"},
                                    {"type": "text", "text": "C"},
                                ],
                            },
                            {"type": "text", "text": "Thanks"},
                        ],
                    }
                ]
            },
            [
                {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
                {"role": "tool", "tool_call_id": "toolu_2", "content": "-3C"},
                {"role": "user", "content": "Thanks"},
            ],
            id="tool-results-then-text",
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Before"},
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "is_error": True,
                                "content": "boom",
                            },
                        ],
                    }
                ]
            },
            [
                {"role": "user", "content": "Before"},
                {"role": "tool", "tool_call_id": "t", "content": "boom", "is_error": True},
            ],
            id="text-then-error-tool-result",
        ),
        pytest.param(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "t"},
                            {
                                "type": "tool_result",
                                "tool_use_id": "u",
                                "content": [
                                    {"type": "text", "text": "shot"},
                                    {
                                        "type": "image",
                                        "source": {"type": "url", "url": "http://x/y.png"},
                                    },
                                ],
                            },
                        ],
                    }
                ]
            },
            [
                {"role": "tool", "tool_call_id": "t", "content": ""},
                {
                    "role": "tool",
                    "tool_call_id": "u",
                    "content": [
                        {"type": "text", "text": "shot"},
                        {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}},
                    ],
                },
            ],
            id="tool-result-empty-and-with-image",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": []}]},
            [{"role": "user", "content": ""}],
            id="user-empty-blocks",
        ),
    ],
)
def test_messages_convert_to_canonical(
    fields: dict[str, Any], expected: list[dict[str, Any]]
) -> None:
    assert parse_request(body(**fields)).messages == expected


def test_request_fields_convert() -> None:
    request = parse_request(
        body(
            model="qwen",
            max_tokens=100,
            stop_sequences=["END"],
            temperature=0.5,
            top_p=0.9,
            top_k=20,
            stream=True,
            metadata={"user_id": "u1"},
            tools=[
                WEATHER_TOOL,
                {"name": "noop", "input_schema": {"type": "object"}, "type": "custom"},
            ],
            tool_choice={"type": "auto", "disable_parallel_tool_use": True},
            thinking={"type": "enabled", "budget_tokens": 2048},
            service_tier="auto",
            some_future_field={"x": 1},
        )
    )
    assert request == CanonicalRequest(
        api="messages",
        model="qwen",
        messages=[{"role": "user", "content": "Hi"}],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather of a city",
                    "parameters": WEATHER_TOOL["input_schema"],
                },
            },
            {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
        ],
        tool_choice="auto",
        parallel_tool_calls=False,
        max_tokens=100,
        temperature=0.5,
        top_p=0.9,
        top_k=20,
        stop=["END"],
        stream=True,
        template_kwargs={"enable_thinking": True},
        metadata={"user_id": "u1"},
    )


def test_minimal_request_defaults() -> None:
    request = parse_request({"model": "m", "messages": [USER]})
    assert request.max_tokens is None  # lenient: Anthropic requires it, rltap does not
    assert (request.stream, request.n, request.stop, request.tools, request.tool_choice) == (
        False,
        1,
        [],
        None,
        None,
    )
    assert request.template_kwargs == {}


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        pytest.param({"type": "auto"}, "auto", id="auto"),
        pytest.param({"type": "any"}, "required", id="any"),
        pytest.param({"type": "none"}, "none", id="none"),
        pytest.param({"type": "tool", "name": "get_weather"}, {"name": "get_weather"}, id="tool"),
    ],
)
def test_tool_choice(tool_choice: dict[str, Any], expected: Any) -> None:
    request = parse_request(body(tools=[WEATHER_TOOL], tool_choice=tool_choice))
    assert (request.tool_choice, request.parallel_tool_calls) == (expected, True)


@pytest.mark.parametrize(
    ("thinking", "expected"),
    [
        pytest.param(
            {"type": "enabled", "budget_tokens": 1024}, {"enable_thinking": True}, id="enabled"
        ),
        pytest.param({"type": "adaptive"}, {"enable_thinking": True}, id="adaptive"),
        pytest.param({"type": "disabled"}, {"enable_thinking": False}, id="disabled"),
    ],
)
def test_thinking_config(thinking: dict[str, Any], expected: dict[str, Any]) -> None:
    assert parse_request(body(thinking=thinking)).template_kwargs == expected


def _with_message(message: dict[str, Any]) -> dict[str, Any]:
    return body(messages=[USER, message])


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        pytest.param({"messages": [USER]}, "model", id="missing-model"),
        pytest.param({"model": "m"}, "messages", id="missing-messages"),
        pytest.param(body(messages=[]), "messages", id="empty-messages"),
        pytest.param(
            body(messages=[{"role": "system", "content": "x"}]),
            "messages[0].role",
            id="system-role",
        ),
        pytest.param(
            body(messages=[{"role": "user", "content": 5}]),
            "messages[0].content",
            id="content-number",
        ),
        pytest.param(
            body(messages=[{"role": "user", "content": [{"text": "x"}]}]),
            "messages[0].content[0].type",
            id="block-without-type",
        ),
        pytest.param(
            _with_message(
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}
            ),
            "messages[1].content[0].input",
            id="tool-use-without-input",
        ),
        pytest.param(
            _with_message(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}],
                }
            ),
            "messages[1].content[0].input",
            id="tool-use-input-not-object",
        ),
        pytest.param(
            _with_message({"role": "assistant", "content": [{"type": "image", "source": {}}]}),
            "messages[1].content[0].type",
            id="image-in-assistant",
        ),
        pytest.param(
            body(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                    }
                ]
            ),
            "messages[0].content[0].type",
            id="tool-use-in-user",
        ),
        pytest.param(
            body(messages=[{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]),
            "messages[0].content[0].tool_use_id",
            id="tool-result-without-id",
        ),
        pytest.param(body(system=[{"type": "image"}]), "system[0].type", id="system-image"),
        pytest.param(body(max_tokens=0), "max_tokens", id="max-tokens-zero"),
        pytest.param(body(max_tokens="many"), "max_tokens", id="max-tokens-text"),
        pytest.param(body(temperature=-0.1), "temperature", id="temperature-negative"),
        pytest.param(body(temperature=float("nan")), "temperature", id="temperature-nan"),
        pytest.param(body(top_p=0), "top_p", id="top-p-zero"),
        pytest.param(body(top_p=1.5), "top_p", id="top-p-above-one"),
        pytest.param(body(top_k=-1), "top_k", id="top-k-negative"),
        pytest.param(body(stop_sequences="END"), "stop_sequences", id="stop-sequences-string"),
        pytest.param(
            body(tool_choice={"type": "tool"}), "tool_choice.name", id="tool-choice-without-name"
        ),
        pytest.param(
            body(tool_choice={"type": "required"}),
            "tool_choice.type",
            id="tool-choice-openai-style",
        ),
        pytest.param(
            body(tools=[{"name": "f"}]), "tools[0].input_schema", id="tool-without-schema"
        ),
        pytest.param(
            body(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
            "tools[0].type",
            id="server-tool",
        ),
        pytest.param(body(thinking={"type": "maybe"}), "thinking.type", id="thinking-type"),
    ],
)
def test_invalid_bodies(raw: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(raw)
    assert info.value.param == param
    assert info.value.status_code == 400


# --- generations, bodies and streams ----------------------------------------------------------


def make_generation(
    *,
    content: str = "",
    reasoning: str | None = None,
    calls: Sequence[tuple[str, str]] = (),
    finish: FinishReason = "stop",
    token_texts: Sequence[str] = (),
    interaction_id: str = f"{ID_PREFIX}0001",
) -> Generation:
    """A generation as the session builds it: parsed output and the canonical output message."""
    tool_calls = [
        ParsedToolCall(id=f"call_{i:024x}", name=name, arguments=arguments)
        for i, (name, arguments) in enumerate(calls)
    ]
    parsed = ParsedOutput(content=content, reasoning=reasoning, tool_calls=tool_calls)
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in tool_calls
        ]
    if reasoning:
        message["reasoning_content"] = reasoning
    n = 7
    stop = StopReason.LENGTH if finish == "length" else StopReason.STOP
    response = ModelResponse(
        input_tokens=list(range(5)),
        output_tokens=[11] * n,
        output_logprobs=[-0.5] * n,
        output_versions=[0] * n,
        stop_reason=StopReason.ABORT if finish == "abort" else stop,
    )
    return Generation(
        index=0,
        interaction_id=interaction_id,
        response=response,
        parsed=parsed,
        finish_reason=finish,
        output_message=message,
        token_texts=list(token_texts),
        created=1_700_000_000.0,
    )


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def deltas_of(generation: Generation, size: int) -> list[Delta]:
    """The parser deltas of a generation, its texts cut into pieces of `size` characters."""
    parsed = generation.parsed
    deltas: list[Delta] = [ReasoningDelta(p) for p in _pieces(parsed.reasoning or "", size)]
    deltas += [ContentDelta(p) for p in _pieces(parsed.content, size)]
    for i, call in enumerate(parsed.tool_calls):
        deltas.append(ToolCallStartDelta(index=i, id=call.id, name=call.name))
        deltas += [
            ToolCallArgumentsDelta(index=i, fragment=p) for p in _pieces(call.arguments, size)
        ]
    return deltas


def stream_events(generation: Generation, deltas: Sequence[Delta]) -> list[StreamEvent]:
    start = GenerationStart(
        index=0,
        interaction_id=generation.interaction_id,
        prompt_tokens=generation.prompt_tokens,
        created=generation.created,
    )
    middle: list[StreamEvent] = [GenerationDelta(index=0, deltas=[d]) for d in deltas]
    return [start, *middle, GenerationEnd(generation=generation)]


def encode_all(request: CanonicalRequest, events: Sequence[StreamEvent]) -> list[SSEEvent]:
    encoder = StreamEncoder(request)
    out = [sse for event in events for sse in encoder.encode(event)]
    return out + encoder.finish()


def sse_bytes(events: Sequence[SSEEvent]) -> bytes:
    """SSE text as `rltap.sse` formats it."""
    chunks: list[bytes] = []
    for sse in events:
        if sse.event is not None:
            chunks.append(f"event: {sse.event}\n".encode())
        data = sse.data.encode() if isinstance(sse.data, str) else orjson.dumps(sse.data)
        chunks.append(b"data: " + data + b"\n\n")
    return b"".join(chunks)


def sdk_client(handler: Any) -> anthropic.AsyncAnthropic:
    http_client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return anthropic.AsyncAnthropic(
        base_url="http://t", api_key="k", http_client=http_client, max_retries=0
    )


async def sdk_stream_final(payload: bytes) -> Message:
    """What the SDK's `messages.stream(...)` accumulator rebuilds from the SSE bytes."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=payload)

    client = sdk_client(handler)
    async with client.messages.stream(model="m", max_tokens=64, messages=[USER]) as stream:
        final = await stream.get_final_message()
    return Message.model_validate(final.model_dump(exclude_none=True))


GENERATIONS = [
    pytest.param(make_generation(content="Hello there! How can I help?"), "end_turn", id="text"),
    pytest.param(
        make_generation(reasoning="The user greets me.", content="Hi!"),
        "end_turn",
        id="reasoning-text",
    ),
    pytest.param(
        make_generation(calls=[("get_weather", '{"city":"Paris"}')], finish="tool_calls"),
        "tool_use",
        id="tool-call",
    ),
    pytest.param(
        make_generation(
            reasoning="Two cities.",
            content="Checking both.",
            calls=[
                ("get_weather", '{"city":"Paris"}'),
                ("get_weather", '{"city":"Oslo","units":["C"]}'),
            ],
            finish="tool_calls",
        ),
        "tool_use",
        id="reasoning-text-two-tool-calls",
    ),
    pytest.param(
        make_generation(calls=[("noop", "{}")], finish="tool_calls"),
        "tool_use",
        id="tool-call-no-args",
    ),
    pytest.param(
        make_generation(content="Once upon a", finish="length"), "max_tokens", id="length"
    ),
    pytest.param(
        make_generation(
            content="1, 2, 3 STOP", token_texts=["1", ",", " 2", ",", " 3", " ST", "OP"]
        ),
        "stop_sequence",
        id="stop-sequence",
    ),
    pytest.param(make_generation(content=""), "end_turn", id="empty"),
]


def _request(stream: bool = False) -> CanonicalRequest:
    return parse_request(body(stop_sequences=["STOP"], stream=stream, tools=[WEATHER_TOOL]))


@pytest.mark.parametrize(("generation", "reason"), GENERATIONS)
def test_build_response_is_an_sdk_message(generation: Generation, reason: str) -> None:
    raw = build_response(_request(), [generation])
    message = Message.model_validate(raw)
    assert (message.id, message.model, message.stop_reason) == (
        generation.interaction_id,
        "m",
        reason,
    )
    assert message.stop_sequence == ("STOP" if reason == "stop_sequence" else None)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 7)
    parsed = generation.parsed
    expected_types = (["thinking"] if parsed.reasoning else []) + (
        ["text"] if parsed.content else []
    )
    assert [b.type for b in message.content] == [
        *expected_types,
        *["tool_use"] * len(parsed.tool_calls),
    ]
    for block in message.content:
        if block.type == "thinking":
            assert (block.thinking, block.signature) == (
                parsed.reasoning,
                generation.interaction_id,
            )
        elif block.type == "text":
            assert block.text == parsed.content
    uses = [b for b in message.content if b.type == "tool_use"]
    for use, call in zip(uses, parsed.tool_calls, strict=True):
        assert use.id == "toolu_" + call.id.removeprefix("call_")
        assert (use.name, use.input) == (call.name, orjson.loads(call.arguments))


async def test_sdk_create_reads_body() -> None:
    generation = make_generation(reasoning="r", content="Hi!")
    raw = build_response(_request(), [generation])
    client = sdk_client(lambda request: httpx2.Response(200, json=raw))
    message = await client.messages.create(model="m", max_tokens=64, messages=[USER])
    assert message.model_dump(exclude_none=True) == Message.model_validate(raw).model_dump(
        exclude_none=True
    )


@pytest.mark.parametrize(
    "size", [pytest.param(1, id="char-pieces"), pytest.param(1000, id="whole")]
)
@pytest.mark.parametrize(("generation", "reason"), GENERATIONS)
async def test_stream_rebuilds_body_in_sdk(generation: Generation, reason: str, size: int) -> None:
    request = _request(stream=True)
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
        _request(stream=True), stream_events(generation, deltas_of(generation, 1000))
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
    events = encode_all(_request(stream=True), stream_events(generation, deltas))
    final = await sdk_stream_final(sse_bytes(events))
    assert [b.type for b in final.content] == ["text", "tool_use", "text"]
    history = [USER, final.to_param(), {"role": "user", "content": "ok"}]
    messages = parse_request(body(messages=_params(history))).messages
    assert canonical_message(messages[1]) == canonical_message(generation.output_message)


async def test_error_mid_stream_reaches_sdk() -> None:
    generation = make_generation(content="Partial answer")
    encoder = StreamEncoder(_request(stream=True))
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
    encoder = StreamEncoder(_request(stream=True))
    assert encoder.finish() == []


def test_arguments_before_tool_start_raise() -> None:
    encoder = StreamEncoder(_request(stream=True))
    encoder.encode(GenerationStart(index=0, interaction_id="msg_1", prompt_tokens=1, created=0.0))
    with pytest.raises(ValueError, match="before its start"):
        encoder.encode(
            GenerationDelta(index=0, deltas=[ToolCallArgumentsDelta(index=0, fragment="{")])
        )


@pytest.mark.parametrize(
    ("token_texts", "stop", "expected"),
    [
        pytest.param(["Done", ".", " END"], ["END"], ("stop_sequence", "END"), id="last-token"),
        pytest.param(["Done", " E", "ND."], ["END"], ("stop_sequence", "END"), id="across-tokens"),
        pytest.param(["END", " and", " more"], ["END"], ("end_turn", None), id="earlier-only"),
        pytest.param(["Done", ""], ["END"], ("end_turn", None), id="eos-token"),
        pytest.param(["Done"], [], ("end_turn", None), id="no-stop-list"),
        pytest.param([], ["END"], ("end_turn", None), id="no-token-texts"),
    ],
)
def test_stop_sequence_detection(
    token_texts: list[str], stop: list[str], expected: tuple[str, str | None]
) -> None:
    generation = make_generation(content="".join(token_texts), token_texts=token_texts)
    request = parse_request(body(stop_sequences=stop))
    raw = build_response(request, [generation])
    assert (raw["stop_reason"], raw["stop_sequence"]) == expected


def test_abort_has_no_stop_reason() -> None:
    raw = build_response(_request(), [make_generation(content="Par", finish="abort")])
    assert raw["stop_reason"] is None
    Message.model_validate(raw)


# --- round trip -------------------------------------------------------------------------------


def _params(history: Sequence[Any]) -> list[dict[str, Any]]:
    """SDK message params (which may hold SDK models) as plain JSON, as the client sends them."""
    result: list[dict[str, Any]] = orjson.loads(
        orjson.dumps(
            list(history),
            default=lambda model: model.model_dump(exclude_none=True),
        )
    )
    return result


@pytest.mark.parametrize(
    "streamed", [pytest.param(False, id="body"), pytest.param(True, id="stream")]
)
@pytest.mark.parametrize(("generation", "reason"), GENERATIONS)
async def test_round_trip_canonical_messages(
    generation: Generation, reason: str, streamed: bool
) -> None:
    request = _request(stream=streamed)
    if streamed:
        events = encode_all(request, stream_events(generation, deltas_of(generation, 2)))
        reply = await sdk_stream_final(sse_bytes(events))
    else:
        reply = Message.model_validate(build_response(request, [generation]))
    uses = [b for b in reply.content if b.type == "tool_use"]
    results = [
        {"type": "tool_result", "tool_use_id": u.id, "content": f"r{i}"} for i, u in enumerate(uses)
    ]
    history = [
        USER,
        reply.to_param(),
        {"role": "user", "content": [*results, {"type": "text", "text": "Go on"}]},
    ]
    messages = parse_request(body(messages=_params(history))).messages
    assert canonical_message(messages[1]) == canonical_message(generation.output_message)
    assert messages[2:] == [
        *({"role": "tool", "tool_call_id": u.id, "content": f"r{i}"} for i, u in enumerate(uses)),
        {"role": "user", "content": "Go on"},
    ]
    if generation.parsed.reasoning:
        assert messages[1]["reasoning_content"] == generation.parsed.reasoning


# --- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "error_type"),
    [
        pytest.param(InvalidRequest("bad", param="x"), "invalid_request_error", id="400"),
        pytest.param(ContextLengthExceeded("too long"), "invalid_request_error", id="400-context"),
        pytest.param(AuthenticationError("key"), "authentication_error", id="401"),
        pytest.param(PermissionDenied("no"), "permission_error", id="403"),
        pytest.param(NotFound("none"), "not_found_error", id="404"),
        pytest.param(Conflict("clash"), "conflict_error", id="409"),
        pytest.param(SessionGone("ended"), "invalid_request_error", id="410"),
        pytest.param(PayloadTooLarge("big"), "request_too_large", id="413"),
        pytest.param(CapacityExhausted("busy"), "rate_limit_error", id="429"),
        pytest.param(RltapError("oops"), "api_error", id="500"),
        pytest.param(EngineError("down"), "api_error", id="502"),
        pytest.param(EngineUnavailable("restarting"), "overloaded_error", id="503"),
        pytest.param(EngineTimeout("slow"), "timeout_error", id="504"),
    ],
)
def test_error_body(exc: RltapError, error_type: str) -> None:
    raw = error_body(exc)
    assert raw == {"type": "error", "error": {"type": error_type, "message": exc.message}}
    if error_type not in {"conflict_error", "request_too_large"}:  # not in the SDK's union
        assert ErrorResponse.model_validate(raw).error.type == error_type


def test_exports() -> None:
    expected = [
        "ID_PREFIX",
        "SPEC",
        "MessageCreateParams",
        "StreamEncoder",
        "build_response",
        "error_body",
        "parse_request",
    ]
    assert sorted(anthropic_messages.__all__) == sorted(expected)
    assert ID_PREFIX == "msg_"
