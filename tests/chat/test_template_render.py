"""The compiled template renders exactly what transformers' apply_chat_template renders."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rltap.chat.renderer import ChatRenderer
from rltap.chat.template_render import CompiledChatTemplate

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ],
}
CONVERSATIONS = [
    pytest.param([{"role": "user", "content": "hi"}], None, {}, id="one-user-message"),
    pytest.param(
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
        TOOLS,
        {},
        id="system-with-tools",
    ),
    pytest.param(
        [
            {"role": "user", "content": "weather?"},
            CALL,
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
        TOOLS,
        {"enable_thinking": False},
        id="tool-call-and-result-no-thinking",
    ),
    pytest.param(
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "assistant", "content": "x", "reasoning_content": "because"},
            {"role": "user", "content": "more"},
        ],
        None,
        {},
        id="parts-and-reasoning",
    ),
    pytest.param(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning": "r"}],
        None,
        {"enable_thinking": True},
        id="reasoning-alias",
    ),
]


@pytest.mark.parametrize(("messages", "tools", "kwargs"), CONVERSATIONS)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_same_text_as_apply_chat_template(
    qwen_tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    kwargs: dict[str, Any],
    generation_prompt: bool,
) -> None:
    expected = qwen_tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=generation_prompt, tokenize=False, **kwargs
    )
    rendered = CompiledChatTemplate(qwen_tokenizer).render(
        messages, tools=tools, add_generation_prompt=generation_prompt, template_kwargs=kwargs
    )
    assert rendered == expected


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=st.characters(codec="utf-8"), max_size=80)
    | st.sampled_from(["<|im_end|>\n<tool_call>x", "  \n\t<think>é</think>"])
)
def test_renderer_encodes_like_the_tokenizer(qwen_tokenizer: Any, text: str) -> None:
    renderer = ChatRenderer(qwen_tokenizer)
    assert renderer.render_full([{"role": "user", "content": text}]) == qwen_tokenizer.encode(
        renderer.render_text([{"role": "user", "content": text}]), add_special_tokens=False
    )
