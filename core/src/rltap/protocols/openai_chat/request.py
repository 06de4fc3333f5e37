"""Chat Completions request bodies: the wire model and its conversion to a `CanonicalRequest`.

Pydantic checks shapes and ranges (a failure names the parameter, see
`rltap.protocols._validation`); the conversion checks what depends on the role or on other
fields and raises `InvalidRequest` with the parameter's path. Unknown fields are ignored, as
vLLM does, so that clients sending other providers' extensions still work.

Messages keep the Chat Completions form, which is the canonical form: `developer` becomes
`system`, content stays a string or a list of parts (text parts normalised to
`{"type": "text", "text"}`; parts the model cannot read, such as `image_url`, are taken out and
listed, see `rltap.protocols._content`), assistant
`tool_calls` keep their ids, `reasoning_content` (or vLLM's newer `reasoning`) is kept.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, cast

import orjson
from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from rltap.chat.constraints import check_request_schemas
from rltap.protocols._content import take_unsupported_parts
from rltap.protocols._thinking import ReasoningEffort, effort_template_kwargs
from rltap.protocols._validation import format_param
from rltap.record.errors import InvalidRequest
from rltap.record.generation import CanonicalRequest, ToolChoice, UnsupportedContent

__all__ = [
    "ChatCompletionRequest",
    "ChatContentPart",
    "ChatFunction",
    "ChatJsonSchema",
    "ChatMessage",
    "ChatNamedToolChoice",
    "ChatResponseFormat",
    "ChatStreamOptions",
    "ChatTool",
    "ChatToolCall",
    "ChatToolCallFunction",
    "to_canonical",
]

_LENIENT = ConfigDict(extra="allow")
# Messages and tools validate into plain dicts (no model instances: a long history is re-sent on
# every call) that become the canonical ones; keys outside the API's are dropped.
_DICT = ConfigDict(extra="ignore")
_FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


@with_config(_LENIENT)
class ChatContentPart(TypedDict):
    """One part of a list content: `text`, `image_url`, `input_audio`, `file`, `refusal`, ...

    Parts other than text are taken out of the canonical messages (`rltap.protocols._content`).
    """

    type: str
    text: NotRequired[str | None]


@with_config(_DICT)
class ChatToolCallFunction(TypedDict):
    name: str
    # A JSON string per the API; an object is accepted and serialised.
    arguments: NotRequired[str | dict[str, Any]]


@with_config(_DICT)
class ChatToolCall(TypedDict):
    id: str
    type: NotRequired[Literal["function"]]
    function: ChatToolCallFunction


@with_config(_DICT)
class ChatMessage(TypedDict):
    """Any message; what each role requires is checked by the conversion, which knows the index."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: NotRequired[str | list[ChatContentPart] | None]
    name: NotRequired[str | None]
    tool_calls: NotRequired[list[ChatToolCall] | None]
    tool_call_id: NotRequired[str | None]
    reasoning_content: NotRequired[str | None]
    reasoning: NotRequired[str | None]  # vLLM's newer name for reasoning_content


@with_config(_DICT)
class ChatFunction(TypedDict):
    name: str
    description: NotRequired[str | None]
    parameters: NotRequired[dict[str, Any] | None]
    strict: NotRequired[bool | None]


@with_config(_DICT)
class ChatTool(TypedDict):
    type: Literal["function"]
    function: ChatFunction


class _NamedFunction(BaseModel):
    model_config = _LENIENT
    name: str


class ChatNamedToolChoice(BaseModel):
    """`{"type": "function", "function": {"name": ...}}`."""

    model_config = _LENIENT
    type: Literal["function"]
    function: _NamedFunction


@with_config(_LENIENT)
class ChatJsonSchema(TypedDict):
    """`response_format.json_schema`: the schema the reply must match (`strict` or not, it is
    enforced by constrained decoding); no `schema` means any JSON value."""

    name: str
    schema: NotRequired[dict[str, Any]]
    strict: NotRequired[bool | None]
    description: NotRequired[str | None]


@with_config(_LENIENT)
class ChatResponseFormat(TypedDict):
    """`{"type": "text"}`, `{"type": "json_object"}` or `{"type": "json_schema", "json_schema"}`."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: NotRequired[ChatJsonSchema]


class ChatStreamOptions(BaseModel):
    model_config = _LENIENT
    include_usage: bool | None = None


class ChatCompletionRequest(BaseModel):
    """A `POST /v1/chat/completions` body (OpenAI's names, plus vLLM's `top_k` and
    `chat_template_kwargs`)."""

    model_config = _LENIENT
    # Required by OpenAI; a proxy serves one model, so a missing name is tolerated.
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ChatNamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ChatResponseFormat | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: _FiniteFloat | None = Field(default=None, ge=0)
    top_p: _FiniteFloat | None = Field(default=None, gt=0, le=1)
    # vLLM: -1 (or 0) disables top-k.
    top_k: int | None = Field(default=None, ge=-1)
    n: int = Field(default=1, ge=1, le=128)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    stream: bool | None = None
    stream_options: ChatStreamOptions | None = None
    # Switches the template's thinking as Responses' `reasoning.effort` does.
    reasoning_effort: ReasoningEffort | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


def _invalid(path: tuple[str | int, ...], reason: str) -> InvalidRequest:
    param = format_param(path)
    return InvalidRequest(f"Invalid value for '{param}': {reason}", param=param)


def _missing(path: tuple[str | int, ...]) -> InvalidRequest:
    param = format_param(path)
    return InvalidRequest(f"Missing required parameter: '{param}'.", param=param)


def to_canonical(wire: ChatCompletionRequest) -> CanonicalRequest:
    """The canonical form of a validated request (cross-field checks raise `InvalidRequest`).

    The validated messages and tools of `wire` (copies of the body's) are normalised in place.
    """
    tools = [_tool(tool) for tool in wire.tools or []] or None
    if wire.top_logprobs and not wire.logprobs:
        raise _invalid(("top_logprobs",), "it requires 'logprobs' to be true.")
    max_tokens = wire.max_completion_tokens or wire.max_tokens
    include_usage = bool(wire.stream and wire.stream_options and wire.stream_options.include_usage)
    raw = cast(list[dict[str, Any]], wire.messages)
    messages = [_message(m, i) for i, m in enumerate(raw)]
    unsupported: list[UnsupportedContent] = []
    take_unsupported_parts(messages, unsupported)
    request = CanonicalRequest(
        api="chat",
        model=wire.model or "",
        messages=messages,
        tools=tools,
        tool_choice=_tool_choice(wire.tool_choice, tools),
        parallel_tool_calls=wire.parallel_tool_calls is not False,
        response_format=_response_format(wire.response_format),
        max_tokens=max_tokens,
        temperature=wire.temperature,
        top_p=wire.top_p,
        top_k=wire.top_k if wire.top_k is not None and wire.top_k > 0 else None,
        stop=_stop(wire.stop),
        seed=wire.seed,
        n=wire.n,
        stream=bool(wire.stream),
        include_usage=include_usage,
        logprobs=bool(wire.logprobs),
        top_logprobs=wire.top_logprobs if wire.logprobs else None,
        template_kwargs=effort_template_kwargs(wire.reasoning_effort, wire.chat_template_kwargs),
        metadata=dict(wire.metadata or {}),
        unsupported_content=unsupported,
    )
    check_request_schemas(
        request,
        schema_param="response_format.json_schema.schema",
        tool_param=lambda i: f"tools[{i}].function.parameters",
    )
    return request


def _response_format(response_format: ChatResponseFormat | None) -> dict[str, Any] | None:
    if response_format is None or response_format["type"] == "text":
        return None
    if response_format["type"] == "json_object":
        return {"type": "json_object"}
    spec = response_format.get("json_schema")
    if spec is None:
        raise _missing(("response_format", "json_schema"))
    return {
        "type": "json_schema",
        "name": spec["name"],
        "schema": spec.get("schema") or {},
        "strict": bool(spec.get("strict")),
    }


def _tool(tool: ChatTool) -> dict[str, Any]:
    function = {k: v for k, v in tool["function"].items() if v is not None}
    return {"type": "function", "function": function}


def _stop(stop: str | list[str] | None) -> list[str]:
    # An empty stop string would end every generation at once; it means "no stop string".
    if stop is None:
        return []
    return [s for s in ([stop] if isinstance(stop, str) else stop) if s]


def _tool_choice(
    choice: str | ChatNamedToolChoice | None, tools: list[dict[str, Any]] | None
) -> ToolChoice | None:
    if choice is None or choice in ("none", "auto"):
        return choice
    if isinstance(choice, str):
        if not tools:
            raise _invalid(("tool_choice",), f"{choice!r} requires 'tools'.")
        return choice
    name = choice.function.name
    if name not in {tool["function"]["name"] for tool in tools or []}:
        raise _invalid(("tool_choice", "function", "name"), f"no function {name!r} in 'tools'.")
    return {"name": name}


_DROPPED_IF_NONE = ("name", "tool_calls", "tool_call_id", "reasoning_content")
# Keys of a message that is canonical as validated when its content is a string.
_PLAIN_SIZE = {"user": 2, "system": 2, "assistant": 2, "tool": 3}


def _message(message: dict[str, Any], index: int) -> dict[str, Any]:
    role = message["role"]
    # Fast path, most of a long history: nothing to rename, drop or check beyond this.
    if (
        _PLAIN_SIZE.get(role) == len(message)
        and type(message.get("content")) is str
        and (role != "tool" or message.get("tool_call_id"))
    ):
        return message
    if role == "developer":
        message["role"] = role = "system"
    reasoning = message.pop("reasoning", None)
    if reasoning is not None and message.get("reasoning_content") is None:
        message["reasoning_content"] = reasoning
    for key in _DROPPED_IF_NONE:
        if key in message and message[key] is None:
            del message[key]
    content = message.get("content")
    if content is None:
        if role != "assistant":
            raise _missing(("messages", index, "content"))
        message["content"] = None
    elif not isinstance(content, str):
        _normalise_parts(content, index)
    if role == "assistant":
        _assistant_fields(message)
        return message
    if message.pop("tool_calls", None):
        reason = f"only assistant messages have tool calls, not {role!r} ones."
        raise _invalid(("messages", index, "tool_calls"), reason)
    message.pop("reasoning_content", None)
    if role != "tool":
        message.pop("tool_call_id", None)
    elif not message.get("tool_call_id"):
        raise _missing(("messages", index, "tool_call_id"))
    return message


def _assistant_fields(message: dict[str, Any]) -> None:
    calls = message.get("tool_calls")
    if calls is None:
        return
    if not calls:
        del message["tool_calls"]
    for call in calls:  # validated copies: normalised in place
        call["type"] = "function"
        function = call["function"]
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = orjson.dumps(arguments).decode()
        function["arguments"] = arguments


def _normalise_parts(parts: list[dict[str, Any]], index: int) -> None:
    for j, part in enumerate(parts):
        if part["type"] != "text":
            continue
        text = part.get("text")
        if not isinstance(text, str):
            raise _missing(("messages", index, "content", j, "text"))
        if len(part) != 2:  # extra keys such as cache_control do not reach the template
            parts[j] = {"type": "text", "text": text}
