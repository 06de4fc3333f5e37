"""Messages requests: content blocks and fields to a `CanonicalRequest`, checked on the way.

The round trip is here too: the reply, re-sent by the SDK as history, parses to the output
message.
"""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message

from rltap.protocols import anthropic_messages
from rltap.protocols.anthropic_messages import ID_PREFIX, build_response, parse_request
from rltap.record.errors import InvalidRequest
from rltap.record.generation import CanonicalRequest, Generation, UnsupportedContent
from rltap.tree.canonical import canonical_message

from ..wire import sse_bytes
from .support import (
    GENERATIONS,
    USER,
    WEATHER_TOOL,
    as_params,
    body,
    deltas_of,
    encode_all,
    request_for,
    sdk_stream_final,
    stream_events,
)


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
            # The image is taken out and listed (test_unsupported_blocks_are_listed).
            [{"role": "user", "content": "What is this?"}],
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
                {"role": "tool", "tool_call_id": "u", "content": "shot"},
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


def test_unsupported_blocks_are_listed() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}
    document = {"type": "document", "source": {"type": "url", "url": "http://x/y.pdf"}}
    request = parse_request(
        body(
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
                {"role": "assistant", "content": "ok"},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": [document]},
                        {"type": "search_result", "source": "s", "title": "t", "content": []},
                    ],
                },
            ]
        )
    )
    assert request.unsupported_content == [
        UnsupportedContent(type="image", param="messages[0].content[1]"),
        UnsupportedContent(type="document", param="messages[2].content[0].content[0].source"),
        UnsupportedContent(type="search_result", param="messages[2].content[1]"),
    ]
    assert request.messages == [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": "ok"},
        {"role": "tool", "tool_call_id": "t", "content": ""},
    ]
    assert parse_request(body()).unsupported_content == []


def test_thread_continue_names_the_message_it_continues() -> None:
    thread = {"type": "continue", "previous_message_id": "msg_1"}
    request = parse_request(body(thread=thread))
    assert (request.previous_response_id, request.continues_thread) == ("msg_1", True)
    created = parse_request(body(thread={"type": "create"}))
    assert (created.previous_response_id, created.continues_thread) == (None, False)
    # Without `tools`, a forced tool is the thread's: looked for by the session, not refused here.
    forced = parse_request(body(thread=thread, tool_choice={"type": "tool", "name": "add"}))
    assert (forced.tools, forced.tool_choice) == (None, {"name": "add"})
    assert parse_request(body(thread=thread, tool_choice={"type": "any"})).tool_choice == "required"
    with pytest.raises(InvalidRequest) as info:  # outside a thread it still needs 'tools'
        parse_request(body(tool_choice={"type": "any"}))
    assert info.value.param == "tool_choice.type"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        pytest.param({"thread": {"type": "continue"}}, "thread.previous_message_id", id="no-id"),
        pytest.param(
            {"thread": {"type": "continue", "previous_message_id": "m"}, "system": "s"},
            "system",
            id="system-on-continue",
        ),
        pytest.param({"thread": {"type": "fork"}}, "thread.type", id="unknown-type"),
    ],
)
def test_thread_mistakes_are_400(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(body(**fields))
    assert info.value.param == param


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


@pytest.mark.parametrize(
    "streamed", [pytest.param(False, id="body"), pytest.param(True, id="stream")]
)
@pytest.mark.parametrize(("generation", "reason"), GENERATIONS)
async def test_round_trip_canonical_messages(
    generation: Generation, reason: str, streamed: bool
) -> None:
    request = request_for(stream=streamed)
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
    messages = parse_request(body(messages=as_params(history))).messages
    assert canonical_message(messages[1]) == canonical_message(generation.output_message)
    assert messages[2:] == [
        *({"role": "tool", "tool_call_id": u.id, "content": f"r{i}"} for i, u in enumerate(uses)),
        {"role": "user", "content": "Go on"},
    ]
    if generation.parsed.reasoning:
        assert messages[1]["reasoning_content"] == generation.parsed.reasoning


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
