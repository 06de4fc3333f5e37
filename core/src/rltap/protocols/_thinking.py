"""OpenAI's reasoning effort as the chat template's thinking switch, for every OpenAI API.

Chat Completions' `reasoning_effort` and Responses' `reasoning.effort` mean the same: `"none"`
turns thinking off (`enable_thinking=False`, the switch Qwen3-style templates read), any other
effort turns it on, no effort leaves the template's default. The chat template cannot take a
degree of effort, so `minimal` ... `xhigh` all mean "think". vLLM's `chat_template_kwargs` name
the template's own switches and win.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["ReasoningEffort", "effort_template_kwargs"]

# OpenAI's efforts; another value is a 400, as OpenAI answers it.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


def effort_template_kwargs(
    effort: str | None, chat_template_kwargs: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The template kwargs for a reasoning `effort` and the request's `chat_template_kwargs`."""
    kwargs: dict[str, Any] = {}
    if effort is not None:
        kwargs["enable_thinking"] = effort != "none"
    kwargs.update(chat_template_kwargs or {})
    return kwargs
