"""The `add` tool that the tool-loop script calls (`rltap.testing.scripts.tool_loop`), in the form
each wire API takes, and the question that makes it call it.

The definition is `rltap.testing.sdk_agents.ADD_TOOL`, the one the SDK agents send."""

from __future__ import annotations

from typing import Any

from rltap.testing.sdk_agents import ADD_TOOL

CHAT_ADD_TOOL: dict[str, Any] = {"type": "function", "function": ADD_TOOL}
RESPONSES_ADD_TOOL: dict[str, Any] = {"type": "function", **ADD_TOOL}
ANTHROPIC_ADD_TOOL: dict[str, Any] = {
    "name": ADD_TOOL["name"],
    "description": ADD_TOOL["description"],
    "input_schema": ADD_TOOL["parameters"],
}
QUESTION = "what is 2 + 2?"
