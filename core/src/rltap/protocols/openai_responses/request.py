"""Responses request bodies: the wire model and its conversion to a `CanonicalRequest`.

Pydantic checks shapes and ranges (a failure names the parameter, see
`rltap.protocols._validation`); the conversion checks what depends on item order or on other
fields and raises `InvalidRequest` with the parameter's path. Unknown fields are ignored.

Input items become Chat Completions messages, the canonical form, so that a conversation reads
the same whatever API it was sent through:

- `input` as a string is one user message; `instructions` is the request's own: the session puts
  it first as a system message, and a later call continuing this one by `previous_response_id`
  does not carry it over (OpenAI does not either);
- messages keep their role (`developer` becomes `system`); `input_text` and `output_text` parts
  become `{"type": "text", "text"}` parts, parts the model cannot read (`input_image`,
  `input_file`, `input_audio`) are taken out and listed (`rltap.protocols._content`); a string
  content stays a string;
- one assistant turn is the run of assistant-side items up to the next user, system or tool item:
  `function_call` items (`call_id` -> tool-call id) join the assistant message before them or
  start one with `content: None`; an assistant message right after the calls of a turn that has
  no text yet fills in that turn's content (a stream may close the calls before the text);
- a `reasoning` item's text (its `reasoning_text` content, else its summary) becomes the
  `reasoning_content` of the assistant turn it opens; a reasoning item with no assistant item
  after it is an assistant turn of its own with `content: None`;
- `function_call_output` is `{"role": "tool", "tool_call_id": call_id, "content": output}`;
- a `compaction` item (what `/v1/responses/compact` returned, see `compaction`) is an assistant
  message holding the model's summary.

Items rltap cannot honour (hosted tool calls, `item_reference`: items are not looked up by id) and
non-function tools are rejected naming their type. `previous_response_id` is passed on; the
session prepends that response's conversation. `reasoning.effort` switches the template's
thinking (`rltap.protocols._thinking`); `reasoning` and `text` are echoed in the reply as sent,
and `reasoning.summary` asks for a reasoning summary (see `response`). `store`, `include`
(except output-text logprobs), `truncation`, `user` and the like are accepted and ignored.
`text.format` (json_object, json_schema) constrains the reply (`rltap.chat.constraints`).
`conversation` is resolved in the caller's session, which keeps conversations
(`rltap.protocols.openai_responses.in_conversation`); reaching here, it is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, with_config
from typing_extensions import TypedDict

from rltap.chat.constraints import check_request_schemas
from rltap.protocols._thinking import ReasoningEffort, effort_template_kwargs
from rltap.protocols._validation import format_param
from rltap.protocols.openai_responses.input_items import InputItem, input_messages
from rltap.record.errors import InvalidRequest
from rltap.record.generation import CanonicalRequest, ToolChoice, UnsupportedContent

__all__ = [
    "FunctionTool",
    "ResponsesReasoning",
    "ResponsesRequest",
    "ResponsesText",
    "ResponsesTextFormat",
    "UnsupportedTool",
    "to_canonical",
]

_LENIENT = ConfigDict(extra="allow")
_FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_LOGPROBS_INCLUDE = "message.output_text.logprobs"
_Path = tuple[str | int, ...]


class FunctionTool(BaseModel):
    """`{"type": "function", "name", "description", "parameters", "strict"}`."""

    model_config = _LENIENT
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class UnsupportedTool(BaseModel):
    """A hosted or custom tool; the conversion rejects it naming the type."""

    model_config = _LENIENT
    type: str


def _tool_tag(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)
    if kind is None:
        return None
    return "Function" if kind == "function" else "Unsupported"


Tool = Annotated[
    Annotated[FunctionTool, Tag("Function")] | Annotated[UnsupportedTool, Tag("Unsupported")],
    Discriminator(
        _tool_tag,
        custom_error_type="invalid_tool",
        custom_error_message="a tool must be an object with a 'type'",
    ),
]


class ResponsesReasoning(BaseModel):
    """`reasoning`: `effort` switches the template's thinking; `summary` asks for the reasoning
    as the reasoning item's summary."""

    model_config = _LENIENT
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


@with_config(_LENIENT)
class ResponsesTextFormat(TypedDict):
    """`text.format`: `{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema",
    "name", "schema", "strict"}` (enforced by constrained decoding, strict or not)."""

    type: Literal["text", "json_object", "json_schema"]
    name: NotRequired[str]
    schema: NotRequired[dict[str, Any]]
    strict: NotRequired[bool | None]
    description: NotRequired[str | None]


@with_config(_LENIENT)
class ResponsesText(TypedDict):
    """`text`: its `format` is the reply's shape (`verbosity` and the rest are ignored)."""

    format: NotRequired[ResponsesTextFormat]


class ResponsesRequest(BaseModel):
    """A `POST /v1/responses` body (OpenAI's names, plus vLLM's `top_k`, `seed` and
    `chat_template_kwargs`)."""

    model_config = _LENIENT
    # Required by OpenAI; a proxy serves one model, so a missing name is tolerated.
    model: str = ""
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: ResponsesText | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: _FiniteFloat | None = Field(default=None, ge=0)
    top_p: _FiniteFloat | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    seed: int | None = None
    include: list[str] | None = None
    stream: bool | None = None
    store: bool | None = None
    background: bool | None = None
    conversation: str | dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    reasoning: ResponsesReasoning | None = None
    chat_template_kwargs: dict[str, Any] | None = None


def to_canonical(wire: ResponsesRequest) -> CanonicalRequest:
    """The canonical form of a validated request (cross-field checks raise `InvalidRequest`)."""
    _reject_server_state(wire)
    unsupported: list[UnsupportedContent] = []
    messages = input_messages(wire.input, unsupported)
    if not messages and not wire.instructions and wire.previous_response_id is None:
        msg = "'input' must not be empty unless 'previous_response_id' is given."
        raise InvalidRequest(msg, param="input")
    tools = _tools(wire.tools)
    logprobs = _LOGPROBS_INCLUDE in (wire.include or [])
    request = CanonicalRequest(
        api="responses",
        model=wire.model,
        messages=messages,
        tools=tools,
        tool_choice=_tool_choice(wire.tool_choice, tools),
        parallel_tool_calls=wire.parallel_tool_calls is not False,
        response_format=_response_format(wire.text),
        max_tokens=wire.max_output_tokens,
        temperature=wire.temperature,
        top_p=wire.top_p,
        top_k=wire.top_k if wire.top_k is not None and wire.top_k > 0 else None,
        seed=wire.seed,
        stream=bool(wire.stream),
        # A Responses body always reports usage, streamed or not.
        include_usage=True,
        logprobs=logprobs,
        top_logprobs=wire.top_logprobs if logprobs else None,
        template_kwargs=_template_kwargs(wire),
        previous_response_id=wire.previous_response_id,
        instructions=wire.instructions or None,
        echo=_echo(wire),
        metadata=dict(wire.metadata or {}),
        unsupported_content=unsupported,
    )
    check_request_schemas(
        request, schema_param="text.format.schema", tool_param=lambda i: f"tools[{i}].parameters"
    )
    return request


def _response_format(text: ResponsesText | None) -> dict[str, Any] | None:
    text_format = (text or {}).get("format")
    if text_format is None or text_format["type"] == "text":
        return None
    if text_format["type"] == "json_object":
        return {"type": "json_object"}
    if "name" not in text_format:
        msg = "Missing required parameter: 'text.format.name'."
        raise InvalidRequest(msg, param="text.format.name")
    return {
        "type": "json_schema",
        "name": text_format["name"],
        "schema": text_format.get("schema") or {},
        "strict": bool(text_format.get("strict")),
    }


def _reject_server_state(wire: ResponsesRequest) -> None:
    # These ask for server-side state rltap does not keep; ignoring them would silently
    # generate from the wrong conversation or never return.
    if wire.conversation is not None:  # a session resolves it before this (its store)
        msg = "'conversation' needs a session's conversations; send the history in 'input'."
        raise InvalidRequest(msg, param="conversation")
    if wire.background:
        msg = "'background' responses are not supported."
        raise InvalidRequest(msg, param="background")


def _template_kwargs(wire: ResponsesRequest) -> dict[str, Any]:
    effort = wire.reasoning.effort if wire.reasoning is not None else None
    return effort_template_kwargs(effort, wire.chat_template_kwargs)


def _as_sent(value: Any) -> Any:
    return value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else value


def _echo(wire: ResponsesRequest) -> dict[str, Any]:
    """`reasoning` and `text` as the reply object repeats them (OpenAI's defaults when unset)."""
    reasoning = {"effort": None, "summary": None, **(_as_sent(wire.reasoning) or {})}
    text = _as_sent(wire.text) or {}
    return {"reasoning": reasoning, "text": {"format": {"type": "text"}, **text}}


def _tools(tools: list[FunctionTool | UnsupportedTool] | None) -> list[dict[str, Any]] | None:
    converted: list[dict[str, Any]] = []
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, FunctionTool):
            msg = f"Tools of type {tool.type!r} are not supported; only 'function' tools are."
            raise InvalidRequest(msg, param=format_param(("tools", i, "type")))
        function = {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
            "strict": tool.strict,
        }
        converted.append(
            {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}
        )
    return converted or None


def _tool_choice(
    choice: str | dict[str, Any] | None, tools: list[dict[str, Any]] | None
) -> ToolChoice | None:
    if choice is None or choice in ("none", "auto"):
        return choice if isinstance(choice, str) else None
    if isinstance(choice, dict) and choice.get("type") != "function":
        msg = f"'tool_choice' of type {choice.get('type')!r} is not supported."
        raise InvalidRequest(msg, param="tool_choice.type")
    if not tools:
        msg = "'tool_choice' other than 'none' or 'auto' requires 'tools'."
        raise InvalidRequest(msg, param="tool_choice")
    if isinstance(choice, str):
        return choice
    name = choice.get("name")
    if not isinstance(name, str) or name not in {t["function"]["name"] for t in tools}:
        msg = f"'tool_choice' names the function {name!r}, which is not in 'tools'."
        raise InvalidRequest(msg, param="tool_choice.name")
    return {"name": name}
