"""Responses input items: their wire models, and how they become canonical messages.

See `rltap.protocols.openai_responses.request` for the rules (one assistant turn per run of
assistant-side items, reasoning opening the turn after it, tool outputs as tool messages).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from rltap.protocols._content import is_supported_part
from rltap.protocols._validation import format_param
from rltap.record.errors import InvalidRequest
from rltap.record.generation import UnsupportedContent

__all__ = [
    "CompactionItem",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "InputContentPart",
    "InputItem",
    "InputMessage",
    "ReasoningItem",
    "UnsupportedItem",
    "input_messages",
]

_LENIENT = ConfigDict(extra="allow")
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_Path = tuple[str | int, ...]


class InputContentPart(BaseModel):
    """One content part: `input_text`, `output_text`, `input_image`, `input_file`, `refusal`."""

    model_config = _LENIENT
    type: str
    text: str | None = None


class InputMessage(BaseModel):
    """A message item (`type` may be omitted, as in the SDK's `EasyInputMessage`)."""

    model_config = _LENIENT
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[InputContentPart]


class FunctionCallItem(BaseModel):
    """A `function_call` the model made earlier (`id` is the item id, `call_id` the call's)."""

    model_config = _LENIENT
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(BaseModel):
    """The result of a function call: a string or a list of content parts."""

    model_config = _LENIENT
    type: Literal["function_call_output"]
    call_id: str | None = None
    output: str | list[InputContentPart]


class _ReasoningPart(BaseModel):
    model_config = _LENIENT
    type: str
    text: str = ""


class ReasoningItem(BaseModel):
    """A `reasoning` item: `content` holds `reasoning_text` parts, `summary` `summary_text` ones."""

    model_config = _LENIENT
    type: Literal["reasoning"]
    summary: list[_ReasoningPart] = Field(default_factory=list)
    content: list[_ReasoningPart] | None = None


class CompactionItem(BaseModel):
    """A `compaction` item (`rltap.protocols.openai_responses.compaction`): rltap's holds the
    model's summary of the turns it replaces, which becomes an assistant message."""

    model_config = _LENIENT
    type: Literal["compaction"]
    encrypted_content: str


class UnsupportedItem(BaseModel):
    """Any other item type; the conversion rejects it naming the type."""

    model_config = _LENIENT
    type: str


def _item_tag(value: Any) -> str | None:
    # CamelCase tags: `_validation` drops them from the error path like union labels.
    if isinstance(value, Mapping):
        kind = value.get("type", "message" if "role" in value else None)
    else:
        kind = getattr(value, "type", None)
    if kind is None:
        return None
    # A tag that is not a string (`{"type": []}`) cannot be looked up: the validator refuses it.
    return _ITEM_TAGS.get(kind, "Unsupported") if isinstance(kind, str) else "Unsupported"


_ITEM_TAGS = {
    "message": "Message",
    "function_call": "FunctionCall",
    "function_call_output": "FunctionCallOutput",
    "reasoning": "Reasoning",
    "compaction": "Compaction",
}

InputItem = Annotated[
    Annotated[InputMessage, Tag("Message")]
    | Annotated[FunctionCallItem, Tag("FunctionCall")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutput")]
    | Annotated[ReasoningItem, Tag("Reasoning")]
    | Annotated[CompactionItem, Tag("Compaction")]
    | Annotated[UnsupportedItem, Tag("Unsupported")],
    Discriminator(
        _item_tag,
        custom_error_type="invalid_item",
        custom_error_message="an input item must be an object with a 'type' or a 'role'",
    ),
]


class _Turns:
    """Builds canonical messages item by item; holds the assistant turn still being assembled."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.assistant: dict[str, Any] | None = None
        self.reasoning: str | None = None

    def end_turn(self) -> None:
        # A reasoning item nothing followed is a turn of its own (a reply cut short while thinking).
        if self.reasoning is not None:
            self._open_assistant(None)
        self.assistant = None

    def add(self, message: dict[str, Any]) -> None:
        self.end_turn()
        self.messages.append(message)

    def reason(self, text: str) -> None:
        if self.reasoning is not None:
            self.reasoning += text
            return
        # Reasoning opens the next assistant turn.
        self.assistant = None
        self.reasoning = text

    def say(self, content: str | list[dict[str, Any]]) -> None:
        turn = self.assistant
        if turn is not None and turn.get("tool_calls") and turn["content"] is None:
            turn["content"] = content
            return
        self._open_assistant(content)

    def call(self, item: FunctionCallItem) -> None:
        turn = self.assistant if self.assistant is not None else self._open_assistant(None)
        turn.setdefault("tool_calls", []).append(
            {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
        )

    def _open_assistant(self, content: str | list[dict[str, Any]] | None) -> dict[str, Any]:
        turn: dict[str, Any] = {"role": "assistant", "content": content}
        if self.reasoning is not None:
            turn["reasoning_content"] = self.reasoning
            self.reasoning = None
        self.messages.append(turn)
        self.assistant = turn
        return turn


def input_messages(
    items: str | list[Any] | None, unsupported: list[UnsupportedContent] | None = None
) -> list[dict[str, Any]]:
    """The canonical messages of `input`; parts the model cannot read are taken out and listed
    in `unsupported` (without a list, the first one is refused)."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    turns = _Turns()
    for i, item in enumerate(items):
        where: _Path = ("input", i)
        if isinstance(item, InputMessage):
            content = _content(item.content, (*where, "content"), unsupported)
            if item.role == "assistant":
                turns.say(content)
            else:
                role = "system" if item.role == "developer" else item.role
                turns.add({"role": role, "content": content})
        elif isinstance(item, FunctionCallItem):
            turns.call(item)
        elif isinstance(item, FunctionCallOutputItem):
            turns.add(_tool_message(item, where, unsupported))
        elif isinstance(item, ReasoningItem):
            turns.reason(_reasoning_text(item))
        elif isinstance(item, CompactionItem):
            turns.add({"role": "assistant", "content": item.encrypted_content})
        else:
            msg = f"Input items of type {item.type!r} are not supported."
            raise InvalidRequest(msg, param=format_param((*where, "type")))
    turns.end_turn()
    return turns.messages


def _tool_message(
    item: FunctionCallOutputItem, where: _Path, unsupported: list[UnsupportedContent] | None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "tool"}
    if item.call_id is not None:
        message["tool_call_id"] = item.call_id
    message["content"] = _content(item.output, (*where, "output"), unsupported)
    return message


def _reasoning_text(item: ReasoningItem) -> str:
    # The full reasoning text when the client kept it, else what the summary says.
    parts = item.content if item.content else item.summary
    return "".join(part.text for part in parts)


def _content(
    content: str | list[InputContentPart],
    where: _Path,
    unsupported: list[UnsupportedContent] | None,
) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if not is_supported_part(part.type):
            found = UnsupportedContent(type=part.type, param=format_param((*where, j)) or "input")
            if unsupported is None:
                raise found.error()
            unsupported.append(found)
        elif part.type not in _TEXT_PARTS:  # a refusal the client echoes back
            parts.append(part.model_dump(exclude_none=True))
        elif part.text is None:
            msg = f"Content parts of type {part.type!r} must have a 'text'."
            raise InvalidRequest(msg, param=format_param((*where, j, "text")))
        else:
            parts.append({"type": "text", "text": part.text})
    return parts
