"""What the agent is asked: a dataset row turned into the SDK's run input."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["INPUT_KEYS", "default_input"]

INPUT_KEYS = ("input", "question", "prompt", "messages")


def default_input(data: Any) -> str | list[Any]:
    """The run input for a row: a string as is, a list as input items, or a mapping's first
    field of `input`, `question`, `prompt`, `messages`.

    Usage:
        default_input({"question": "What is 2+3?", "answer": "5"})  # "What is 2+3?"
    """
    if isinstance(data, str | list):
        return data
    if isinstance(data, Mapping):
        for key in INPUT_KEYS:
            value = data.get(key)
            if isinstance(value, str | list):
                return value
        found = ", ".join(map(repr, data)) or "none"
        msg = (
            f"the row has none of the fields {', '.join(INPUT_KEYS)} (it has {found}); pass "
            "input_fn=... to say what the agent is asked"
        )
        raise ValueError(msg)
    msg = f"cannot make an agent input from a {type(data).__name__} row; pass input_fn=..."
    raise TypeError(msg)
