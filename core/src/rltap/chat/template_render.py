"""Chat templates compiled once and rendered as transformers' `apply_chat_template` renders them.

`apply_chat_template(tokenize=False)` normalises the messages, rebuilds every value as plain data
and looks the compiled template up again on each call. Messages reaching the renderer are plain
JSON data already, so this does only what changes the output: drop keys whose value is None,
alias the reasoning fields (`reasoning_content`, `thinking`, `reasoning`) as transformers does,
give every message a `content` ("" where it is null or missing), and render a template compiled
once in the Jinja environment transformers documents for chat templates: an immutable sandbox
with `trim_blocks` and `lstrip_blocks`, loop controls, the `{% generation %}` block,
`raise_exception`, `strftime_now` and a `tojson` that keeps non-ASCII text. A test checks the
output equals `apply_chat_template`'s.

The one difference is on purpose: a tool-call reply comes back with `content: null`, which
`apply_chat_template` drops, and templates that use the content as text (Qwen3's tests
`'</think>' in message.content`) fail on the echoed reply. OpenAI's null and "" mean the same (the
canonical comparison treats them alike), so templates see "", as vLLM gives them; those that test
`if message.content` or `is string` render the same either way.

Why a copy and not `transformers.utils.chat_template_utils.render_jinja_template` (which
renders the same text): that function rebuilds the messages, tools and arguments as plain data
on every call, a cost that grows with the conversation. Measured with the Qwen template the
tests use, on this 2-core shared host (`.venv/bin/python bench/template_render.py --rounds 25`,
2026-12, CPU time): a concat call's window (5 messages, tools) 0.14 ms here against 0.18 ms
(+0.03 to +0.06 ms a call, 1.3x), a whole 33-message conversation (hf mode) 0.68 against
0.83 ms (+0.08 to +0.15 ms a call). One render per proxy call, so at the top of today's hop
(0.45-0.95 ms added) it would cross the 1 ms budget.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jinja2 import TemplateError, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["REASONING_FIELDS", "CompiledChatTemplate", "compile_chat_template"]

# The names a message's reasoning goes by; transformers aliases them for the template.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` renders its body (it marks assistant text for
    masks that rltap does not take from the template)."""

    tags = {"generation"}  # noqa: RUF012 - jinja's own declaration

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def compile_chat_template(source: str) -> Any:
    """`source` compiled as a chat template (a `jinja2.Template`)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


def _prepare(message: Mapping[str, Any]) -> dict[str, Any]:
    prepared = {key: value for key, value in message.items() if value is not None}
    prepared.setdefault("content", "")
    for field in REASONING_FIELDS:
        reasoning = prepared.get(field)
        if reasoning is not None:
            return {"thinking": reasoning, **prepared, "reasoning_content": reasoning}
    return prepared


class CompiledChatTemplate:
    """A tokenizer's chat template, compiled once; `render` gives apply_chat_template's text."""

    def __init__(self, tokenizer: Any, chat_template: str | None = None) -> None:
        self._template = compile_chat_template(chat_template or tokenizer.chat_template)
        self._special_tokens = dict(tokenizer.special_tokens_map)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        template_kwargs: Mapping[str, Any] | None,
    ) -> str:
        """The template's text; raises `jinja2.TemplateError` where the template refuses."""
        context = {
            **self._special_tokens,
            **(template_kwargs or {}),
            "messages": [_prepare(m) for m in messages],
            "tools": [dict(t) for t in tools] if tools else None,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        return str(self._template.render(context))
