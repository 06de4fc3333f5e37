"""Anthropic Messages request bodies (`POST /v1/messages`) -> `CanonicalRequest`.

Conversion rules (every one keeps a conversation's canonical messages the same whichever API sent
it, see `rltap.tree.canonical`):

- `system` (a string or text blocks) becomes one leading system message; an empty one none.
- A user message's blocks are read in order: each `tool_result` block becomes one canonical
  `{"role": "tool", "tool_call_id", "content"}` message, the text blocks between them one user
  message. So `[tool_result, tool_result, text]` is two tool messages followed by a user message.
  Blocks the model cannot read (image, document, search_result, ...; in a tool result too) are
  taken out and listed with their path (`rltap.protocols._content`). `cache_control` is dropped
  from every block: clients move it from turn to turn, and it must not make the same history look
  different.
- A tool result's content is its string, or its text blocks joined.
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
- `thread: {"type": "continue", "previous_message_id"}` (the SDK's `tool_runner` sends it with
  only the new messages) continues that message of the session, as Responses'
  `previous_response_id` does: its conversation precedes `messages`, and its tools carry over
  when `tools` is left out; `system` cannot be changed on a continuation (400). A message the
  session lacks is a 404 with `error_code: "thread_not_found"`, on which the SDK replays the
  whole history. `{"type": "create"}` is a plain request.
- Only client tools (`input_schema`, no `type` or `type: "custom"`) are supported; Anthropic's
  server tools (web search, code execution, ...) cannot run here and are rejected.
- `tool_choice` and the output format (`output_config.format`, the beta's `output_format`): see
  `reply_shape`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rltap.chat.constraints import check_request_schemas
from rltap.protocols.anthropic_messages.content import (
    ContentBlockParam,
    MessageParam,
    OtherBlockParam,
    RedactedThinkingBlockParam,
    TextBlockParam,
    ThinkingBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
    canonical_messages,
)
from rltap.protocols.anthropic_messages.reply_shape import (
    JSONOutputFormatParam,
    OutputConfigParam,
    ToolChoiceParam,
    canonical_tool_choice,
    response_format,
)
from rltap.record.errors import InvalidRequest
from rltap.record.generation import CanonicalRequest, UnsupportedContent

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
    "ThreadParam",
    "ToolChoiceParam",
    "ToolParam",
    "ToolResultBlockParam",
    "ToolUseBlockParam",
    "to_canonical",
]


class _WireModel(BaseModel):
    # Lenient like the API's clients expect: fields rltap does not use are accepted and ignored.
    model_config = ConfigDict(extra="allow")


class ToolParam(_WireModel):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None


class ThreadParam(_WireModel):
    """`thread`: `{"type": "create"}` or `{"type": "continue", "previous_message_id": ...}`."""

    type: Literal["create", "continue"]
    previous_message_id: str | None = None


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
    thread: ThreadParam | None = None


def to_canonical(params: MessageCreateParams) -> CanonicalRequest:
    """The canonical form of a validated request (cross-field checks raise `InvalidRequest`)."""
    _check_sampling(params)
    unsupported: list[UnsupportedContent] = []
    continued = _continued_message(params)
    tools = _canonical_tools(params.tools)
    tool_choice, parallel = canonical_tool_choice(
        params.tool_choice, tools if tools or continued is None else _thread_tools(params)
    )
    template_kwargs: dict[str, Any] = {}
    if params.thinking is not None:
        template_kwargs["enable_thinking"] = params.thinking.type != "disabled"
    request = CanonicalRequest(
        api="messages",
        model=params.model,
        messages=canonical_messages(params.system, params.messages, unsupported),
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
        previous_response_id=continued,
        continues_thread=continued is not None,
        unsupported_content=unsupported,
    )
    schema_param = "output_format.schema" if params.output_format else "output_config.format.schema"
    check_request_schemas(
        request, schema_param=schema_param, tool_param=lambda i: f"tools[{i}].input_schema"
    )
    return request


def _continued_message(params: MessageCreateParams) -> str | None:
    thread = params.thread
    if thread is None or thread.type == "create":
        return None
    if not thread.previous_message_id:
        msg = "Missing required parameter: 'thread.previous_message_id'."
        raise InvalidRequest(msg, param="thread.previous_message_id")
    if params.system:
        msg = "a thread continuation keeps the thread's system prompt; 'system' cannot be sent"
        raise InvalidRequest(msg, param="system")
    return thread.previous_message_id


def _thread_tools(params: MessageCreateParams) -> list[dict[str, Any]]:
    # A continuation without `tools` calls its thread's, which only the session knows: the tool
    # a `tool_choice` forces is looked for there, when its grammar is built (a 400 if absent).
    name = params.tool_choice.name if params.tool_choice is not None else None
    return [{"type": "function", "function": {"name": name or ""}}]


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
