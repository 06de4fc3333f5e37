"""Scripts for the scripted engine: deterministic replies that exercise an agent's tool loop.

`tool_loop` calls the first offered tool once, with arguments made from its JSON schema, then
answers with the tool's result. Agents of every framework run through it the same way: a real tool
call, the tool result, then a final answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]] | None

__all__ = [
    "FINAL_PREFIX",
    "arguments_for",
    "content_text",
    "echo",
    "tool_call_text",
    "tool_loop",
    "tool_names",
    "tool_then_answer",
]

FINAL_PREFIX = "Final answer:"

_SAMPLE_VALUES: dict[str, Any] = {
    "string": "2+3",
    "integer": 2,
    "number": 2,
    "boolean": True,
    "array": [],
    "object": {},
}


def arguments_for(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for a canonical (Chat Completions) tool: a sample value per required property."""
    function = tool.get("function", tool)
    schema = function.get("parameters") or {}
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = schema.get("required") or list(properties)
    arguments: dict[str, Any] = {}
    for name in required:
        spec = properties.get(name, {})
        kind = spec.get("type", "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        arguments[name] = spec["enum"][0] if spec.get("enum") else _SAMPLE_VALUES.get(kind, "x")
    return arguments


def tool_call_text(name: str, arguments: Mapping[str, Any] | None = None, /, **keyword: Any) -> str:
    """A reply that calls tool `name` in the hermes format the test proxies parse (arguments as
    a mapping or as keywords): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`."""
    call = {"name": name, "arguments": {**(arguments or {}), **keyword}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def content_text(message: Mapping[str, Any]) -> str:
    """A message's content as text: a list of parts joined, no content as ""."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content or "")


def tool_names(tools: Tools) -> list[str]:
    """The names of the tools a call offers (Chat Completions' or flat tool definitions)."""
    return [tool.get("function", tool).get("name") for tool in tools or ()]


def _last_tool_result(messages: Messages) -> str | None:
    if not messages or messages[-1].get("role") != "tool":
        return None
    return content_text(messages[-1])


def tool_then_answer(
    name: str, arguments: Mapping[str, Any], answer: str | Callable[[str], str]
) -> Callable[[Messages, Tools, int], str]:
    """A script that calls tool `name` with `arguments`, then, given its result, answers with
    `answer` (or `answer(result)`)."""

    def script(messages: Messages, tools: Tools, turn: int) -> str:
        result = _last_tool_result(messages)
        if result is None:
            return tool_call_text(name, arguments)
        return answer if isinstance(answer, str) else answer(result)

    return script


def tool_loop(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """A tool call on the first turn when tools are offered, then the final answer."""
    result = _last_tool_result(messages)
    if result is not None:
        return f"{FINAL_PREFIX} {result}"
    if tools and turn == 0:
        tool = tools[0]
        return tool_call_text(tool.get("function", tool).get("name"), arguments_for(tool))
    return echo(messages, tools, turn)


def echo(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """Repeats the last user message, with the turn number: `Turn 0: you said: ...`."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    content = "" if last is None else content_text(last)
    return f"Turn {turn}: you said: {content}"
