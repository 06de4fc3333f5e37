"""Chat Completions requests: messages and fields to a `CanonicalRequest`, checked on the way.

The round trip is here too: a reply the SDK gives back as history parses to the output message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from rltap.protocols import openai_chat as proto
from rltap.record.errors import InvalidRequest
from rltap.record.generation import UnsupportedContent
from rltap.tree.canonical import canonical_message

from .support import SCENARIOS, USER, Scenario, generation_of, request

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(USER, USER, id="user-string"),
        pytest.param(
            {"role": "user", "content": [{"type": "text", "text": "a"}, IMAGE]},
            {"role": "user", "content": [{"type": "text", "text": "a"}]},
            id="user-parts-image-taken-out",
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


def test_parts_the_model_cannot_read_are_listed_where_they_were() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    file = {"type": "file", "file": {"file_id": "file-1"}}
    refusal = {"type": "refusal", "refusal": "no"}
    request = proto.parse_request(
        {
            "messages": [
                {"role": "user", "content": [IMAGE, {"type": "text", "text": "a"}]},
                {"role": "assistant", "content": [refusal]},
                {"role": "user", "content": [audio, file]},
            ]
        }
    )
    assert request.unsupported_content == [
        UnsupportedContent(type="image_url", param="messages[0].content[0]"),
        UnsupportedContent(type="input_audio", param="messages[2].content[0]"),
        UnsupportedContent(type="file", param="messages[2].content[1]"),
    ]
    assert [m["content"] for m in request.messages] == [
        [{"type": "text", "text": "a"}],
        [refusal],  # the model's own words, echoed back: kept
        [],
    ]


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
            {"reasoning_effort": "none"},
            {"template_kwargs": {"enable_thinking": False}},
            id="reasoning-effort-none",
        ),
        pytest.param(
            {"reasoning_effort": "minimal"},
            {"template_kwargs": {"enable_thinking": True}},
            id="reasoning-effort-minimal",
        ),
        pytest.param(
            {"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}},
            {"template_kwargs": {"enable_thinking": False}},
            id="chat-template-kwargs-win-over-effort",
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
        pytest.param(
            {"messages": [USER], "reasoning_effort": "enormous"},
            "reasoning_effort",
            id="reasoning-effort",
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
