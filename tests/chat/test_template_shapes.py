"""A template's output remembered per conversation shape equals a fresh rendering, always.

Two sides: conversations whose texts the template only prints are filled in from the remembered
output (and must equal the plain rendering whatever the texts hold), and templates that look
inside a text in any way are caught by the probes and rendered every time.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import _compile_jinja_template

from rltap.chat.template_render import CompiledChatTemplate
from rltap.chat.template_shapes import ShapeCache

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"],
            },
        },
    }
]

# Texts that would trip a careless splice: the template's own markers, the probes' sentinel
# characters, whitespace at the ends, and an empty text (part of the shape, never probed).
TEXTS = st.text(max_size=30) | st.sampled_from(
    ["", " ", "  padded\n", "<|im_end|>\n<|im_start|>", "\x00<&'\"\\>\x00", "{{ x }}", "0"]
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(TEXTS)})
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["user", "assistant", "call", "tool", "parts"]))
        if kind == "call":
            call = {
                "id": draw(TEXTS),
                "type": "function",
                "function": {"name": "search", "arguments": draw(TEXTS)},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "tool":
            messages.append({"role": "tool", "tool_call_id": draw(TEXTS), "content": draw(TEXTS)})
        elif kind == "parts":
            parts = [{"type": "text", "text": draw(TEXTS)} for _ in range(draw(st.integers(1, 2)))]
            messages.append({"role": "user", "content": parts})
        else:
            messages.append({"role": kind, "content": draw(TEXTS)})
    return messages


def _retexted(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The same shape with every non-empty text replaced by `text` (non-empty)."""

    def walk(value: Any, key: str | None) -> Any:
        if isinstance(value, str):
            return value if not value or key in ("role", "type", "name") else text
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, None) for v in value]
        return value

    return [walk(m, None) for m in messages]


@settings(max_examples=150, deadline=None)
@given(
    messages=conversations(),
    other_text=st.text(min_size=1, max_size=20),
    tools=st.sampled_from([None, TOOLS]),
    kwargs=st.sampled_from([{}, {"enable_thinking": False}]),
    generation_prompt=st.booleans(),
)
def test_filled_in_output_equals_a_fresh_rendering(
    qwen_tokenizer: Any,
    messages: list[dict[str, Any]],
    other_text: str,
    tools: list[dict[str, Any]] | None,
    kwargs: dict[str, Any],
    generation_prompt: bool,
) -> None:
    remembered = CompiledChatTemplate(qwen_tokenizer)
    fresh = CompiledChatTemplate(qwen_tokenizer, remember_shapes=False)
    # The first call learns the shape; the second is filled in with other texts.
    for conversation in (messages, _retexted(messages, other_text), messages):
        arguments = {
            "tools": tools,
            "add_generation_prompt": generation_prompt,
            "template_kwargs": kwargs,
        }
        assert remembered.render(conversation, **arguments) == fresh.render(
            conversation, **arguments
        )


def _key(context: dict[str, Any]) -> str:
    return repr(sorted(context.items()))


def _render(shapes: ShapeCache, messages: list[dict[str, Any]], context: dict[str, Any]) -> str:
    return shapes.render(messages, lambda: context, _key(context))


def test_a_plain_conversation_is_remembered_and_filled_in(qwen_tokenizer: Any) -> None:
    template = _compile_jinja_template(qwen_tokenizer.chat_template)
    shapes = ShapeCache(template, qwen_tokenizer.chat_template)
    context = {"add_generation_prompt": True, "tools": None}
    first = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    second = [{"role": "system", "content": "Be long."}, {"role": "user", "content": " Yo\n"}]
    assert shapes.learned(first, _key(context)) is None
    assert _render(shapes, first, context) == template.render(messages=first, **context)
    assert shapes.learned(second, _key(context)) is True
    assert _render(shapes, second, context) == template.render(messages=second, **context)


def test_a_different_tool_order_is_a_different_shape(qwen_tokenizer: Any) -> None:
    # Keys print in their order with tojson, so reordered tools must not share an entry.
    remembered = CompiledChatTemplate(qwen_tokenizer)
    fresh = CompiledChatTemplate(qwen_tokenizer, remember_shapes=False)
    messages = [{"role": "user", "content": "find it"}]
    reordered = [{"function": TOOLS[0]["function"], "type": "function"}]
    for tools in (TOOLS, reordered):
        arguments = {"tools": tools, "add_generation_prompt": True, "template_kwargs": {}}
        assert remembered.render(messages, **arguments) == fresh.render(messages, **arguments)


# Each template looks inside the first message's text (`t`) in its own way.
INSPECTING = {
    "trim-filter": "{{ t | trim }}",
    "strip-method": "{{ t.strip() }}",
    "split": "{{ t.split('a')[0] }}",
    "in-test": "{% if 'a' in t %}A{% endif %}{{ t }}",
    "length": "{{ t | length }}{{ t }}",
    "slice": "{{ t[:2] }}",
    "index": "{{ t[0] }}",
    "equality": "{% if t == 'abc' %}same{% endif %}{{ t }}",
    "tojson": "{{ t | tojson }}",
    "escape": "{{ t | e }}",
    "upper": "{{ t | upper }}",
    "replace": "{{ t | replace('a', 'b') }}",
    "indent": "{{ t | indent(2, true) }}",
    "wordcount": "{{ t | wordcount }}",
    "striptags": "{{ t | striptags }}",
    "first": "{{ t | first }}",
    "list": "{{ t | list | join('-') }}",
    "format-width": "{{ '%8s' | format(t) }}",
    "str-format-width": "{{ '{:>8}'.format(t) }}",
    "percent-operator": "{{ '%8s' % t }}",
    "joined-then-trimmed": "{{ (t ~ '  ') | trim }}",
    "added-then-stripped": "{{ (t + '  ').strip() }}",
    "set-block-then-trimmed": "{% set b %}{{ t }}  {% endset %}{{ b | trim }}",
    "macro-then-trimmed": "{% macro m(x) %}{{ x }}  {% endmacro %}{{ m(t) | trim }}",
    "dict-key": "{{ {'abc': 'X'}.get(t, '') }}{{ t }}",
    "sorted": "{{ [t, 'm'] | sort | join }}",
    "unique": "{{ [t, 'abc'] | unique | join }}",
    "truncate": "{{ t | truncate(5) }}",
    "center": "{{ t | center(12) }}",
}


@pytest.mark.parametrize("body", INSPECTING.values(), ids=INSPECTING.keys())
def test_a_template_that_looks_inside_a_text_is_rendered_every_time(
    qwen_tokenizer: Any, body: str
) -> None:
    source = "{%- set t = messages[0].content -%}" + body
    template = _compile_jinja_template(source)
    shapes = ShapeCache(template, source)
    context: dict[str, Any] = {}
    texts = ["abc", "  abc  ", "b", "a  b", "zzzzzzzzzz<b>x</b>"]
    for text in texts:
        messages = [{"role": "user", "content": text}]
        assert _render(shapes, messages, context) == template.render(messages=messages)
    assert shapes.learned([{"role": "user", "content": "q"}], _key(context)) is False


@pytest.mark.parametrize(
    "body",
    [
        "{{ t }}",
        "{{ t ~ '!' }}",
        "{{ '<' + t + '>' }}",
        "{{ t }}{{ t }}",
        "{% if t %}non-empty{% endif %}",
        "{{ t | string }}",
        "{% macro m(x) %}[{{ x }}]{% endmacro %}{{ m(t) }}",
        "{{ '%s' | format(t) if false else t }}",
    ],
)
def test_a_template_that_only_prints_a_text_is_filled_in(qwen_tokenizer: Any, body: str) -> None:
    source = "{%- set t = messages[0].content -%}" + body
    template = _compile_jinja_template(source)
    shapes = ShapeCache(template, source)
    for text in ["abc", "  abc  ", "\x00<&'\"\\>\x00", "{{ t }}"]:
        messages = [{"role": "user", "content": text}]
        assert _render(shapes, messages, {}) == template.render(messages=messages)
    assert shapes.learned([{"role": "user", "content": "q"}], _key({})) is True


def test_a_template_error_is_raised_by_the_plain_rendering(qwen_tokenizer: Any) -> None:
    source = "{{ raise_exception('no ' + messages[0].role) }}"
    template = _compile_jinja_template(source)
    shapes = ShapeCache(template, source)
    with pytest.raises(Exception, match="no user"):
        _render(shapes, [{"role": "user", "content": "x"}], {})


def test_values_that_are_not_json_are_rendered_every_time(qwen_tokenizer: Any) -> None:
    source = "{{ messages[0].content }}|{{ messages[0].extra }}"
    template = _compile_jinja_template(source)
    shapes = ShapeCache(template, source)
    messages = [{"role": "user", "content": "x", "extra": {1, 2}}]
    assert _render(shapes, messages, {}) == template.render(messages=messages)
    assert shapes.learned(messages, _key({})) is False


def test_at_most_max_shapes_are_kept(qwen_tokenizer: Any) -> None:
    source = "{% for m in messages %}{{ m.content }}{% endfor %}"
    template = _compile_jinja_template(source)
    shapes = ShapeCache(template, source, max_shapes=2)
    conversations = [[{"role": "user", "content": "x"}] * n for n in (1, 2, 3)]
    for messages in conversations:
        _render(shapes, messages, {})
    assert [shapes.learned(m, _key({})) for m in conversations] == [None, True, True]


def test_remembered_text_is_bounded_in_characters(qwen_tokenizer: Any) -> None:
    source = "{{ prefix }}{% for m in messages %}{{ m.content }}{% endfor %}"
    template = _compile_jinja_template(source)
    shapes = ShapeCache(template, source, max_chars=8000)

    def render(n: int, prefix: str) -> str:
        messages = [{"role": "user", "content": "a"}] * n
        # The context key is the prefix's length: small, so only the fixed text counts.
        return shapes.render(messages, lambda: {"prefix": prefix}, len(prefix))

    def learned(n: int, prefix: str) -> bool | None:
        return shapes.learned([{"role": "user", "content": "a"}] * n, len(prefix))

    small, big = "x" * 900, "y" * 1100  # big: over 8000 // 8 characters, never kept
    assert render(1, small) == "x" * 900 + "a"
    assert render(3, big) == "y" * 1100 + "aaa"
    assert learned(1, small) is True
    assert learned(3, big) is False
    for n in range(2, 12):  # 900 fixed characters each: the oldest make room
        render(n, small)
    assert learned(1, small) is None
    assert learned(11, small) is True
