"""What an Anthropic request asks the reply to be: its tool choice and its output format.

`tool_choice` `{"type": "any"}` is the canonical "required", `{"type": "tool", "name"}` a named
tool (which must be in `tools`), `"auto"` and `"none"` themselves; `disable_parallel_tool_use` is
`parallel_tool_calls: false`. Each is enforced by constrained decoding (`rltap.chat.constraints`).

Structured outputs: the anthropic SDK's `messages.parse(output_format=Model)` sends
`output_config: {"format": {"type": "json_schema", "schema": {...}}}`; the structured-outputs
beta (`anthropic-beta: structured-outputs-2025-11-13`) first sent the same object as a top-level
`output_format`. Either becomes `{"type": "json_schema", "name": "output", "schema", "strict":
True}` (Anthropic's structured outputs are always strict): the reply's text is one JSON value of
the schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, with_config
from typing_extensions import TypedDict

from rltap.record.errors import InvalidRequest
from rltap.record.generation import ToolChoice

__all__ = [
    "JSONOutputFormatParam",
    "OutputConfigParam",
    "ToolChoiceParam",
    "canonical_tool_choice",
    "response_format",
]


@with_config(ConfigDict(extra="allow"))
class JSONOutputFormatParam(TypedDict):
    """`{"type": "json_schema", "schema": {...}}`."""

    type: Literal["json_schema"]
    schema: dict[str, Any]


class OutputConfigParam(BaseModel):
    """`output_config`: its `format` constrains the reply (`effort` and the rest are ignored)."""

    model_config = ConfigDict(extra="allow")
    format: JSONOutputFormatParam | None = None


def response_format(
    output_config: OutputConfigParam | None, output_format: JSONOutputFormatParam | None
) -> dict[str, Any] | None:
    """The canonical response format of a request's `output_config` and `output_format`."""
    config_format = output_config.format if output_config is not None else None
    if config_format is not None and output_format is not None:
        msg = "Give the output format once: 'output_config.format' or 'output_format', not both."
        raise InvalidRequest(msg, param="output_format")
    chosen = config_format or output_format
    if chosen is None:
        return None
    return {"type": "json_schema", "name": "output", "schema": chosen["schema"], "strict": True}


class ToolChoiceParam(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


def canonical_tool_choice(
    choice: ToolChoiceParam | None, tools: list[dict[str, Any]] | None
) -> tuple[ToolChoice | None, bool]:
    """The canonical tool choice and `parallel_tool_calls` of a request with canonical `tools`."""
    if choice is None:
        return None, True
    parallel = not choice.disable_parallel_tool_use
    if choice.type == "any" and not tools:
        msg = "tool_choice of type 'any' needs 'tools'"
        raise InvalidRequest(msg, param="tool_choice.type")
    if choice.type == "tool":
        if not choice.name:
            msg = "tool_choice of type 'tool' needs the tool's name"
            raise InvalidRequest(msg, param="tool_choice.name")
        if choice.name not in {tool["function"]["name"] for tool in tools or []}:
            msg = f"tool_choice names the tool {choice.name!r}, which is not in 'tools'"
            raise InvalidRequest(msg, param="tool_choice.name")
        return {"name": choice.name}, parallel
    return ("required" if choice.type == "any" else choice.type), parallel
