"""What the output parsers produce: a parsed reply, its tool calls and the streaming deltas.

A whole reply parses to one `ParsedOutput`. A streaming parser yields `Delta` values as text
arrives; `fold_deltas` turns the deltas of one reply back into the `ParsedOutput` that parsing the
whole text gives.

Tool-call ids come from an `IdFactory` (a zero-argument callable). The default draws random ids;
tests pass `sequential_call_ids()` so that two runs over the same text give the same ids.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

__all__ = [
    "ContentDelta",
    "Delta",
    "IdFactory",
    "ParsedOutput",
    "ParsedToolCall",
    "ReasoningDelta",
    "ToolCallArgumentsDelta",
    "ToolCallStartDelta",
    "fold_deltas",
    "output_message",
    "random_call_id",
    "sequential_call_ids",
]

IdFactory = Callable[[], str]
"""Returns a fresh tool-call id each call (`call_<hex>`)."""


def random_call_id() -> str:
    """A random tool-call id, `call_` followed by 24 hex digits."""
    return f"call_{secrets.token_hex(12)}"


def sequential_call_ids(start: int = 0) -> IdFactory:
    """A deterministic id factory: `call_000000000000000000000000`, `call_...01`, ...

    Usage:
        new_id = sequential_call_ids()
        parser.parse(text, new_id=new_id)
    """
    counter = count(start)
    return lambda: f"call_{next(counter):024x}"


@dataclass(frozen=True, slots=True)
class ParsedToolCall:
    """One tool call found in model output; `arguments` is compact JSON text of an object."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    """A model reply split into visible content, reasoning and tool calls.

    `content` is the text outside reasoning and tool calls ("" when there is none), as decoded
    but for the whitespace touching that markup; `reasoning` is the reasoning text, less the
    whitespace touching its tags, or None when there is none (see `rltap.chat.streaming`).
    """

    content: str
    reasoning: str | None = None
    tool_calls: list[ParsedToolCall] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """More visible content."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """More reasoning text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStartDelta:
    """A new tool call; `index` counts calls of the reply from 0."""

    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgumentsDelta:
    """More of the JSON arguments of the tool call at `index`."""

    index: int
    fragment: str


Delta = ContentDelta | ReasoningDelta | ToolCallStartDelta | ToolCallArgumentsDelta


def fold_deltas(deltas: Iterable[Delta]) -> ParsedOutput:
    """Concatenate the deltas of one reply into a `ParsedOutput`.

    Text is joined as is (a streaming parser already left the markup out); reasoning is None
    when no reasoning delta came. An arguments delta for an index that never started raises
    ValueError.
    """
    content: list[str] = []
    reasoning: list[str] = []
    starts: dict[int, ToolCallStartDelta] = {}
    arguments: dict[int, list[str]] = {}
    for delta in deltas:
        match delta:
            case ContentDelta(text=text):
                content.append(text)
            case ReasoningDelta(text=text):
                reasoning.append(text)
            case ToolCallStartDelta(index=index):
                starts[index] = delta
                arguments.setdefault(index, [])
            case ToolCallArgumentsDelta(index=index, fragment=fragment):
                if index not in starts:
                    msg = f"arguments for tool call {index} before its start delta"
                    raise ValueError(msg)
                arguments[index].append(fragment)
    calls = [
        ParsedToolCall(id=start.id, name=start.name, arguments="".join(arguments[index]))
        for index, start in sorted(starts.items())
    ]
    return ParsedOutput(
        content="".join(content),
        reasoning="".join(reasoning) if reasoning else None,
        tool_calls=calls,
    )


def output_message(parsed: ParsedOutput) -> dict[str, Any]:
    """The canonical assistant message of a parsed reply (what the client sends back later)."""
    message: dict[str, Any] = {"role": "assistant"}
    if parsed.tool_calls:
        message["content"] = parsed.content or None
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in parsed.tool_calls
        ]
    else:
        message["content"] = parsed.content
    if parsed.reasoning is not None:
        message["reasoning_content"] = parsed.reasoning
    return message
