"""Anthropic Messages request bodies (`POST /v1/messages`) -> `CanonicalRequest`.

Conversion rules (every one keeps a conversation's canonical messages the same whichever API sent
it, see `rltap.canonical`):

- `system` (a string or text blocks) becomes one leading system message; an empty one none.
- A user message's blocks are read in order: each `tool_result` block becomes one canonical
  `{"role": "tool", "tool_call_id", "content"}` message, the other blocks (text, image, document,
  ...) between them one user message. So `[tool_result, tool_result, text]` is two tool messages
  followed by a user message. `cache_control` is dropped from every block: clients move it from
  turn to turn, and it must not make the same history look different.
- A tool result's content is its string, its text blocks joined, or (with images) a part list.
  `is_error: true` stays on the tool message as `"is_error": True`, outside the text: the model
  reads the same tool output it would through the OpenAI APIs, and canonical forms ignore the key.
- An assistant message is ONE canonical assistant message: its text blocks joined (a streamed
  reply may split its text around a tool call, while the recorded reply has one string), its
  `thinking` blocks as `reasoning_content`, its `tool_use` blocks as `tool_calls` (arguments:
  compact JSON of `input`). `redacted_thinking` holds another provider's encrypted data, which no
  template can render, so it contributes nothing.
- `max_tokens` is required by Anthropic but optional here (lenient, like the rest of the body):
  missing means "as many as the context allows". Values < 1 are rejected.
- `thinking: {"type": "enabled" | "adaptive" | "between_tools"}` sets the template's
  `enable_thinking` to True, `{"type": "disabled"}` to False; no `thinking` leaves it unset.
- Only client tools (`input_schema`, no `type` or `type: "custom"`) are supported; Anthropic's
  server tools (web search, code execution, ...) cannot run here and are rejected.
- `tool_choice` and the output format (`output_config.format`, the beta's `output_format`): see
  `reply_shape`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from rltap.chat.constraints import check_request_schemas
from rltap.errors import InvalidRequest
from rltap.generation import CanonicalRequest
from rltap.protocols.anthropic_messages.reply_shape import (
    JSONOutputFormatParam,
    OutputConfigParam,
    ToolChoiceParam,
    canonical_tool_choice,
    response_format,
)

__all__ = [
    "ContentBlockParam",
    "JSONOutputFormatParam",
    "MessageCreateParams",
    "MessageParam",
    "OtherBlockParam",
    "OutputConfigParam",
    "RedactedThinkingBlockParam",
    "TextBlockParam",
    "ThinkingBlockParam",
    "ThinkingConfigParam",
    "ToolChoiceParam",
    "ToolParam",
    "ToolResultBlockParam",
    "ToolUseBlockParam",
    "to_canonical",
]


class _WireModel(BaseModel):
    # Lenient like the API's clients expect: fields rltap does not use are accepted and ignored.
    model_config = ConfigDict(extra="allow")


class TextBlockParam(_WireModel):
    type: Literal["text"]
    text: str


class ToolUseBlockParam(_WireModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


class ThinkingBlockParam(_WireModel):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlockParam(_WireModel):
    type: Literal["redacted_thinking"]
    data: str


class OtherBlockParam(_WireModel):
    """Any other block (image, document, search_result, ...): passed through as a content part."""

    type: str


def _block_tag(value: Any) -> str:
    # Tags are class names so that `_validation` drops them from the reported parameter path.
    kind = value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)
    return _BLOCK_TAGS.get(kind, "OtherBlockParam") if isinstance(kind, str) else "OtherBlockParam"


ToolResultContentParam = Annotated[
    Annotated[TextBlockParam, Tag("TextBlockParam")]
    | Annotated[OtherBlockParam, Tag("OtherBlockParam")],
    Discriminator(_block_tag),
]


class ToolResultBlockParam(_WireModel):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultContentParam] | None = None
    is_error: bool | None = None


_BLOCK_TAGS = {
    "text": "TextBlockParam",
    "tool_use": "ToolUseBlockParam",
    "tool_result": "ToolResultBlockParam",
    "thinking": "ThinkingBlockParam",
    "redacted_thinking": "RedactedThinkingBlockParam",
}

ContentBlockParam = Annotated[
    Annotated[TextBlockParam, Tag("TextBlockParam")]
    | Annotated[ToolUseBlockParam, Tag("ToolUseBlockParam")]
    | Annotated[ToolResultBlockParam, Tag("ToolResultBlockParam")]
    | Annotated[ThinkingBlockParam, Tag("ThinkingBlockParam")]
    | Annotated[RedactedThinkingBlockParam, Tag("RedactedThinkingBlockParam")]
    | Annotated[OtherBlockParam, Tag("OtherBlockParam")],
    Discriminator(_block_tag),
]


class MessageParam(_WireModel):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlockParam]


class ToolParam(_WireModel):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None


class ThinkingConfigParam(_WireModel):
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = None


class MessageCreateParams(_WireModel):
    """The body of `POST /v1/messages`, with the API's own field names."""

    model: str
    messages: list[MessageParam] = Field(min_length=1)
    max_tokens: int | None = None
    system: str | list[TextBlockParam] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingConfigParam | None = None
    output_config: OutputConfigParam | None = None
    # The structured-outputs beta's first field (`anthropic-beta: structured-outputs-2025-11-13`),
    # sent by SDKs before `output_config.format` replaced it.
    output_format: JSONOutputFormatParam | None = None
    metadata: dict[str, Any] | None = None


def to_canonical(params: MessageCreateParams) -> CanonicalRequest:
    """The canonical form of a validated request (cross-field checks raise `InvalidRequest`)."""
    _check_sampling(params)
    tools = _canonical_tools(params.tools)
    tool_choice, parallel = canonical_tool_choice(params.tool_choice, tools)
    template_kwargs: dict[str, Any] = {}
    if params.thinking is not None:
        template_kwargs["enable_thinking"] = params.thinking.type != "disabled"
    request = CanonicalRequest(
        api="messages",
        model=params.model,
        messages=_canonical_messages(params),
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        response_format=response_format(params.output_config, params.output_format),
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        stop=list(params.stop_sequences or []),
        stream=bool(params.stream),
        template_kwargs=template_kwargs,
        metadata=dict(params.metadata or {}),
    )
    schema_param = "output_format.schema" if params.output_format else "output_config.format.schema"
    check_request_schemas(
        request, schema_param=schema_param, tool_param=lambda i: f"tools[{i}].input_schema"
    )
    return request


def _check_sampling(params: MessageCreateParams) -> None:
    if params.max_tokens is not None and params.max_tokens < 1:
        msg = f"max_tokens must be >= 1, got {params.max_tokens}"
        raise InvalidRequest(msg, param="max_tokens")
    temperature = params.temperature
    if temperature is not None and not (math.isfinite(temperature) and temperature >= 0):
        msg = f"temperature must be a finite number >= 0, got {temperature}"
        raise InvalidRequest(msg, param="temperature")
    if params.top_p is not None and not (math.isfinite(params.top_p) and 0 < params.top_p <= 1):
        msg = f"top_p must be in (0, 1], got {params.top_p}"
        raise InvalidRequest(msg, param="top_p")
    if params.top_k is not None and params.top_k < 0:
        msg = f"top_k must be >= 0, got {params.top_k}"
        raise InvalidRequest(msg, param="top_k")


def _canonical_tools(tools: list[ToolParam] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    canonical: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if tool.type not in (None, "custom"):
            msg = f"tool type {tool.type!r} is not supported; only client tools with input_schema"
            raise InvalidRequest(msg, param=f"tools[{i}].type")
        if tool.input_schema is None:
            msg = f"Missing required parameter: 'tools[{i}].input_schema'."
            raise InvalidRequest(msg, param=f"tools[{i}].input_schema")
        function: dict[str, Any] = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        function["parameters"] = tool.input_schema
        canonical.append({"type": "function", "function": function})
    return canonical


def _canonical_messages(params: MessageCreateParams) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    system: str | list[dict[str, Any]] | None
    if isinstance(params.system, list):
        system = _content_of_parts([{"type": "text", "text": b.text} for b in params.system])
    else:
        system = params.system
    if system:
        messages.append({"role": "system", "content": system})
    for i, message in enumerate(params.messages):
        if message.role == "assistant":
            messages.append(_assistant_message(message.content, i))
        else:
            messages.extend(_user_messages(message.content, i))
    return messages


def _assistant_message(content: str | list[Any], i: int) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        if isinstance(block, TextBlockParam):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlockParam):
            reasoning.append(block.thinking)
        elif isinstance(block, ToolUseBlockParam):
            arguments = orjson.dumps(block.input).decode()
            function = {"name": block.name, "arguments": arguments}
            calls.append({"id": block.id, "type": "function", "function": function})
        elif not isinstance(block, RedactedThinkingBlockParam):
            msg = f"content block type {block.type!r} is not supported in assistant messages"
            raise InvalidRequest(msg, param=f"messages[{i}].content[{j}].type")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    return message


def _user_messages(content: str | list[Any], i: int) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        if isinstance(block, ToolResultBlockParam):
            if parts:
                messages.append({"role": "user", "content": _content_of_parts(parts)})
                parts = []
            messages.append(_tool_message(block))
        elif isinstance(block, ToolUseBlockParam | ThinkingBlockParam | RedactedThinkingBlockParam):
            msg = f"content block type {block.type!r} is only allowed in assistant messages"
            raise InvalidRequest(msg, param=f"messages[{i}].content[{j}].type")
        else:
            parts.append(_content_part(block))
    if parts or not messages:
        messages.append({"role": "user", "content": _content_of_parts(parts)})
    return messages


def _content_part(block: TextBlockParam | OtherBlockParam) -> dict[str, Any]:
    if isinstance(block, TextBlockParam):
        return {"type": "text", "text": block.text}
    return block.model_dump(exclude={"cache_control"})


def _content_of_parts(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if not parts:
        return ""
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def _tool_message(block: ToolResultBlockParam) -> dict[str, Any]:
    content: str | list[dict[str, Any]]
    if block.content is None:
        content = ""
    elif isinstance(block.content, str):
        content = block.content
    else:
        parts = [_content_part(part) for part in block.content]
        if all(part["type"] == "text" for part in parts):
            content = "".join(part["text"] for part in parts)
        else:
            content = parts
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": block.tool_use_id,
        "content": content,
    }
    if block.is_error:
        message["is_error"] = True
    return message
