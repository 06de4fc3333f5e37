"""Reading what a chain or an agent returned, for reward functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

__all__ = ["final_text"]


def final_text(result: Any) -> str:
    """The final answer's text in what a LangChain runnable returned.

    Handles a string (a chain ending in `StrOutputParser`), a message (a chat model or a chain
    ending in one, Responses content blocks included), and an agent's state
    (`create_agent(...)` returns `{"messages": [...]}`: the last AI message counts).
    Anything else is turned into its `str()`.
    """
    if isinstance(result, str):
        return result
    if isinstance(result, BaseMessage):
        return str(result.text)  # a str subclass that is also callable
    if isinstance(result, Mapping) and isinstance(result.get("messages"), Sequence):
        replies = [m for m in result["messages"] if isinstance(m, AIMessage)]
        return str(replies[-1].text) if replies else ""
    return str(result)
