"""An echoed tool-call reply (`content: null`) renders with every chat template, Qwen3's own
included: the template sees `content: ""`, which is what OpenAI's null means."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import pytest

from rltap.chat.renderer import ChatRenderer, ParentTokens
from rltap.chat.template import QWEN_CHAT_TEMPLATE
from rltap.chat.template_render import CompiledChatTemplate

# tests/chat/data/README.md: the sha256 of the template as published.
QWEN3_TEMPLATE_SHA256 = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


def _call(call_id: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "add", "arguments": arguments}}


ECHO = {"role": "assistant", "content": None, "tool_calls": [_call("c1", '{"a": 2, "b": 3}')]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "5"}
CONVERSATIONS = [
    pytest.param(
        [{"role": "user", "content": "add 2 and 3"}, ECHO, RESULT], TOOLS, id="call-and-result"
    ),
    pytest.param(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "add 2 and 3"},
            {**ECHO, "reasoning_content": "I should call add."},
            RESULT,
        ],
        TOOLS,
        id="system-and-reasoning",
    ),
    pytest.param(
        [
            {"role": "user", "content": "add twice"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call("c1", '{"a": 1, "b": 1}'), _call("c2", '{"a": 2, "b": 2}')],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "2"},
            {"role": "tool", "tool_call_id": "c2", "content": "4"},
            {"role": "assistant", "content": "2 and 4"},
            {"role": "user", "content": "again"},
            ECHO,
            RESULT,
        ],
        TOOLS,
        id="parallel-calls-then-a-second-query",
    ),
    pytest.param(
        [
            {"role": "user", "content": "add"},
            {"role": "assistant", "tool_calls": ECHO["tool_calls"]},
        ],
        TOOLS,
        id="content-key-missing",
    ),
]


def _with_empty_content(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "content": "" if m.get("content") is None else m["content"]} for m in messages]


@pytest.fixture(params=["rltap", "qwen3"])
def template(request: pytest.FixtureRequest, qwen3_chat_template: str) -> str:
    return QWEN_CHAT_TEMPLATE if request.param == "rltap" else qwen3_chat_template


def test_the_qwen3_template_is_the_published_text(qwen3_chat_template: str) -> None:
    digest = hashlib.sha256(qwen3_chat_template.encode()).hexdigest()
    assert digest == QWEN3_TEMPLATE_SHA256


@pytest.mark.parametrize(("messages", "tools"), CONVERSATIONS)
@pytest.mark.parametrize("generation_prompt", [True, False])
@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}], ids=["default", "no-think"])
def test_null_content_renders_as_empty_content(
    qwen_tokenizer: Any,
    template: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    generation_prompt: bool,
    kwargs: Mapping[str, Any],
) -> None:
    expected = qwen_tokenizer.apply_chat_template(
        _with_empty_content(messages),
        tools=tools,
        chat_template=template,
        add_generation_prompt=generation_prompt,
        tokenize=False,
        **kwargs,
    )
    rendered = CompiledChatTemplate(qwen_tokenizer, template).render(
        messages, tools=tools, add_generation_prompt=generation_prompt, template_kwargs=kwargs
    )
    assert rendered == expected
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>' in rendered


def test_qwen3_concat_turn_after_a_null_content_echo(
    qwen_tokenizer: Any, qwen3_chat_template: str
) -> None:
    renderer = ChatRenderer(qwen_tokenizer, chat_template=qwen3_chat_template, mode="concat")
    opening = [{"role": "user", "content": "add 2 and 3"}]
    first = renderer.render(opening, tools=TOOLS)
    reply = (
        "<think>\nI should call add.\n</think>\n\n"
        '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>'
    )
    parent = ParentTokens(
        token_ids=[*first.input_ids, *qwen_tokenizer.encode(reply)], message_count=2
    )

    child = renderer.render([*opening, ECHO, RESULT], tools=TOOLS, parent=parent)

    assert child.reused_len == len(parent.token_ids)
    assert child.input_ids[: child.reused_len] == list(parent.token_ids)
    new_text = qwen_tokenizer.decode(child.input_ids[child.reused_len :])
    assert new_text == (
        "\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
