"""Chat templates rendered the way transformers renders them, without its per-call overhead.

`apply_chat_template(tokenize=False)` normalises the messages, rebuilds every value as plain data
for its sandbox, re-reads the special tokens and looks the compiled template up on each call:
about as much time as the proxy may spend on a whole request. Messages reaching the renderer are
already plain JSON data, so this does only what changes the output: drop keys whose value is None,
alias the reasoning fields (`reasoning_content`, `thinking`, `reasoning`) as transformers does, and
render the template compiled once, with the same Jinja environment. A test checks the output
equals `apply_chat_template` on conversations with tools, tool calls, reasoning and part lists.
Conversations of a shape seen before are not rendered again: `rltap.chat.template_shapes` fills
their texts into the remembered output, when the template only prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from rltap.chat.template_shapes import ShapeCache

__all__ = ["REASONING_FIELDS", "CompiledChatTemplate"]

# The names a message's reasoning goes by; transformers aliases them for the template.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _prepare(message: Mapping[str, Any]) -> dict[str, Any]:
    prepared = {key: value for key, value in message.items() if value is not None}
    for field in REASONING_FIELDS:
        reasoning = prepared.get(field)
        if reasoning is not None:
            return {"thinking": reasoning, **prepared, "reasoning_content": reasoning}
    return prepared


def _context_key(
    tools: Sequence[Mapping[str, Any]] | None,
    template_kwargs: Mapping[str, Any] | None,
    add_generation_prompt: bool,
) -> tuple[bytes, bytes, bool] | None:
    """What the template variables besides the messages come to, as a shape key; None when
    they are not JSON. Tools are not sorted: a tool's key order shows in its JSON."""
    try:
        return (
            orjson.dumps(tools) if tools else b"",
            orjson.dumps(template_kwargs, option=orjson.OPT_NON_STR_KEYS)
            if template_kwargs
            else b"",
            add_generation_prompt,
        )
    except TypeError:
        return None


class CompiledChatTemplate:
    """A tokenizer's chat template, compiled once; `render` gives apply_chat_template's text."""

    def __init__(
        self, tokenizer: Any, chat_template: str | None = None, *, remember_shapes: bool = True
    ) -> None:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        source = chat_template or tokenizer.chat_template
        self._template = _compile_jinja_template(source)
        self._special_tokens = dict(tokenizer.special_tokens_map)
        self._shapes = ShapeCache(self._template, source) if remember_shapes else None

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        template_kwargs: Mapping[str, Any] | None,
    ) -> str:
        def context() -> dict[str, Any]:
            return {
                **self._special_tokens,
                **(template_kwargs or {}),
                "tools": [dict(t) for t in tools] if tools else None,
                "documents": None,
                "add_generation_prompt": add_generation_prompt,
            }

        prepared = [_prepare(m) for m in messages]
        if self._shapes is not None:
            key = _context_key(tools, template_kwargs, add_generation_prompt)
            if key is not None:
                return self._shapes.render(prepared, context, key)
        return str(self._template.render(messages=prepared, **context()))
