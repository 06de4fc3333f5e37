"""Responses requests: `input` items and options to a `CanonicalRequest`, checked on the way.

The round trip is here too: the reply's output items, re-sent as input, parse to the output
message.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from rltap.protocols import openai_responses as proto
from rltap.record.errors import InvalidRequest
from rltap.record.generation import UnsupportedContent
from rltap.tree.canonical import canonical_message

from .support import (
    CASE_PARAMS,
    WEATHER_TOOL,
    encode_all,
    make_generation,
    request_for,
    resent_history,
    stream_events,
)


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
            # The image is taken out and listed (test_parts_the_model_cannot_read_are_listed).
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
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


def test_parts_the_model_cannot_read_are_listed() -> None:
    request = proto.parse_request(
        {
            "model": "m",
            "instructions": "be brief",
            "input": [
                {"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "c",
                    "output": [
                        {"type": "input_text", "text": "seen"},
                        {"type": "input_image", "image_url": "data:x"},
                    ],
                },
                {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
            ],
        }
    )
    assert request.unsupported_content == [
        UnsupportedContent(type="input_file", param="input[0].content[0]"),
        UnsupportedContent(type="input_image", param="input[2].output[1]"),
        UnsupportedContent(type="input_audio", param="input[3].content[0]"),
    ]
    assert request.messages[2]["content"] == [{"type": "text", "text": "seen"}]


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


def test_instructions_are_the_requests_own_not_a_message() -> None:
    # The session puts them first; a call continuing this one must not carry them over.
    request = proto.parse_request({"input": "hi", "instructions": "Be brief."})
    assert request.instructions == "Be brief."
    assert request.messages == [{"role": "user", "content": "hi"}]
    assert proto.parse_request({"instructions": "Only this."}).messages == []


@pytest.mark.parametrize(
    ("extra", "echo"),
    [
        pytest.param(
            {},
            {
                "reasoning": {"effort": None, "summary": None},
                "text": {"format": {"type": "text"}},
            },
            id="defaults",
        ),
        pytest.param(
            {
                "reasoning": {"effort": "low", "summary": "auto"},
                "text": {"format": {"type": "text"}, "verbosity": "low"},
            },
            {
                "reasoning": {"effort": "low", "summary": "auto"},
                "text": {"format": {"type": "text"}, "verbosity": "low"},
            },
            id="as-sent",
        ),
    ],
)
def test_reasoning_and_text_are_kept_as_sent_for_the_reply(
    extra: dict[str, Any], echo: dict[str, Any]
) -> None:
    assert proto.parse_request({"input": "hi", **extra}).echo == echo


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
        pytest.param(
            {"input": "x", "reasoning": {"effort": "enormous"}}, "reasoning.effort", id="effort"
        ),
        pytest.param(
            {"input": "x", "reasoning": {"summary": "long"}}, "reasoning.summary", id="summary"
        ),
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
