"""The compiled template renders exactly what transformers' apply_chat_template renders."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import TemplateError

from rltap.chat.renderer import ChatRenderer
from rltap.chat.template_render import CompiledChatTemplate
from rltap.record.errors import InvalidRequest

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


def _assert_renders_as_apply_chat_template(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    generation_prompt: bool = False,
    kwargs: dict[str, Any] | None = None,
    chat_template: str | None = None,
) -> None:
    expected = tokenizer.apply_chat_template(
        messages,
        tools=tools,
        chat_template=chat_template,
        add_generation_prompt=generation_prompt,
        tokenize=False,
        **(kwargs or {}),
    )
    rendered = CompiledChatTemplate(tokenizer, chat_template).render(
        messages, tools=tools, add_generation_prompt=generation_prompt, template_kwargs=kwargs
    )
    assert rendered == expected, messages


@pytest.mark.parametrize(("messages", "tools", "kwargs"), CONVERSATIONS)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_same_text_as_apply_chat_template(
    qwen_tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    kwargs: dict[str, Any],
    generation_prompt: bool,
) -> None:
    _assert_renders_as_apply_chat_template(
        qwen_tokenizer, messages, tools=tools, generation_prompt=generation_prompt, kwargs=kwargs
    )


# Texts that would trip a careless renderer: the template's own markers, characters escaping
# would change, whitespace at the ends, Jinja syntax, and an empty text.
TEXTS = st.text(max_size=30) | st.sampled_from(
    ["", " ", "  padded\n", "<|im_end|>\n<|im_start|>", "\x00<&'\"\\>\x00", "{{ x }}", "0"]
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(TEXTS)})
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["user", "assistant", "call", "tool", "parts", "reasoning"]))
        if kind == "call":
            call = {
                "id": draw(TEXTS),
                "type": "function",
                "function": {"name": "get_weather", "arguments": draw(TEXTS)},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "tool":
            messages.append({"role": "tool", "tool_call_id": draw(TEXTS), "content": draw(TEXTS)})
        elif kind == "parts":
            parts = [{"type": "text", "text": draw(TEXTS)} for _ in range(draw(st.integers(1, 2)))]
            messages.append({"role": "user", "content": parts})
        elif kind == "reasoning":
            messages.append(
                {"role": "assistant", "content": draw(TEXTS), "reasoning_content": draw(TEXTS)}
            )
        else:
            messages.append({"role": kind, "content": draw(TEXTS)})
    return messages


@settings(max_examples=150, deadline=None)
@given(
    messages=conversations(),
    tools=st.sampled_from([None, TOOLS]),
    kwargs=st.sampled_from([{}, {"enable_thinking": False}]),
    generation_prompt=st.booleans(),
)
def test_random_conversations_render_as_apply_chat_template(
    qwen_tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    kwargs: dict[str, Any],
    generation_prompt: bool,
) -> None:
    _assert_renders_as_apply_chat_template(
        qwen_tokenizer, messages, tools=tools, generation_prompt=generation_prompt, kwargs=kwargs
    )


# Templates that look inside a text (`t`, the first message's content) in their own ways, and
# use what transformers' environment offers: its tojson, loop controls, the generation block.
BODIES = {
    "print": "{{ t }}",
    "join": "{{ '<' + t + '>' }}{{ t ~ '!' }}",
    "trim-filter": "{{ t | trim }}",
    "strip-method": "{{ t.strip() }}",
    "split": "{{ t.split('a')[0] }}",
    "in-test": "{% if 'a' in t %}A{% endif %}{{ t }}",
    "length-slice-index": "{{ t | length }}{{ t[:2] }}{{ t[0] }}",
    "equality": "{% if t == 'abc' %}same{% endif %}{{ t }}",
    "tojson": "{{ t | tojson }}{{ {'é': [t, 1]} | tojson(indent=2) }}",
    "tojson-options": "{{ {'b': t, 'a': 1} | tojson(separators=(',', ':'), sort_keys=true) }}",
    "escape-upper-replace": "{{ t | e }}{{ t | upper }}{{ t | replace('a', 'b') }}",
    "indent-wordcount-striptags": "{{ t | indent(2, true) }}{{ t | wordcount }}{{ t | striptags }}",
    "format": "{{ '%8s' | format(t) }}{{ '{:>8}'.format(t) }}{{ '%8s' % t }}",
    "set-block": "{% set b %}{{ t }}  {% endset %}{{ b | trim }}",
    "macro": "{% macro m(x) %}[{{ x }}]  {% endmacro %}{{ m(t) | trim }}",
    "sort-unique-truncate": "{{ [t, 'm'] | sort | unique | join }}{{ t | truncate(5) }}",
    "loop-controls": (
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% if m.role == 'system' %}{% continue %}{% endif %}{{ m.role }}{% endfor %}"
    ),
    "generation-block": "{% generation %}{{ t }}{% set inner = 1 %}{% endgeneration %}",
    "special-tokens": "{{ eos_token }}{{ pad_token }}{{ t }}",
    "whitespace-control": "{% if t %}\n  {{ t }}\n{% endif %}\n",
}


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_a_custom_template_renders_as_apply_chat_template(qwen_tokenizer: Any, body: str) -> None:
    source = "{%- set t = messages[0].content -%}" + body
    for text in ["abc", "  abc  ", "b", "a  b", "zzzzzzzzzz<b>x</b>", "\x00<&'\"\\>\x00", "é"]:
        messages = [{"role": "user", "content": text}, {"role": "assistant", "content": "x"}]
        _assert_renders_as_apply_chat_template(qwen_tokenizer, messages, chat_template=source)


def test_strftime_now_gives_the_current_date(qwen_tokenizer: Any) -> None:
    _assert_renders_as_apply_chat_template(
        qwen_tokenizer,
        [{"role": "user", "content": "x"}],
        chat_template="{{ strftime_now('%Y-%m-%d') }}",
    )


@pytest.mark.parametrize(
    ("source", "match"),
    [
        pytest.param("{{ raise_exception('no ' + messages[0].role) }}", "no user", id="raises"),
        pytest.param("{{ messages.append(1) }}", "unsafe", id="mutates-its-input"),
    ],
)
def test_a_template_that_fails_is_an_invalid_request(
    qwen_tokenizer: Any, source: str, match: str
) -> None:
    messages = [{"role": "user", "content": "x"}]
    with pytest.raises(TemplateError, match=match):
        qwen_tokenizer.apply_chat_template(messages, chat_template=source, tokenize=False)
    with pytest.raises(InvalidRequest, match=match):
        ChatRenderer(qwen_tokenizer, chat_template=source).render_text(messages)


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
