"""What a concat call renders to find the text of its new messages (`ChatRenderer.render`).

A call continuing its parent's tokens needs only the template's text of its new messages: the
rendering of a short window of the conversation (`render_window`), cut after as many end-of-turn
markers as the window's covered head renders alone (`end_of_nth`), that count remembered per
head shape (`head_shape`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from rltap.chat.template_render import REASONING_FIELDS

__all__ = ["end_of_nth", "head_shape", "render_window"]


def head_shape(
    head: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    template_kwargs: Mapping[str, Any] | None,
    marker: str,
) -> tuple[Any, ...] | None:
    """What the number of end-of-turn markers in the rendering of `head` can depend on; None
    when the messages, tools or template arguments contain the marker's text (or are not JSON)."""
    try:
        text = orjson.dumps([list(head), tools])
        kwargs = orjson.dumps(template_kwargs or {}, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    if marker.encode() in text or marker.encode() in kwargs:
        return None
    roles = tuple(
        (
            message.get("role"),
            bool(message.get("tool_calls")),
            any(message.get(key) is not None for key in REASONING_FIELDS),
            type(message.get("content")).__name__,
            bool(message.get("content")),
            bool(message.get("name")),
        )
        for message in head
    )
    return roles, bool(tools), kwargs


def render_window(
    messages: Sequence[Mapping[str, Any]], covered: int
) -> tuple[Sequence[Mapping[str, Any]], int]:
    """The messages to render to find the text of the new ones, and how many of them are covered.

    Rendering the whole conversation on every call would make a call's cost grow with its
    history. The new messages' text depends on the system message (and the tools block the
    template puts there) and on the message before them (tool results group by it), so the window
    is: the leading system message, the last covered message, then the new messages.
    """
    head = [messages[0]] if messages[0].get("role") in ("system", "developer") else []
    if covered - 1 <= len(head):
        return messages, covered
    return [*head, *messages[covered - 1 :]], len(head) + 1


def end_of_nth(text: str, marker: str, n: int) -> int | None:
    """The index just past the n-th occurrence of `marker` in `text` (None if fewer, or n < 1)."""
    if n < 1:
        return None
    at = -len(marker)
    for _ in range(n):
        at = text.find(marker, at + len(marker))
        if at < 0:
            return None
    return at + len(marker)
