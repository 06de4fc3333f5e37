"""The Conversations API subset agents use: a session's conversations and their items.

What the OpenAI Agents SDK's `OpenAIConversationsSession` and `Runner.run(conversation_id=...)`
call: create a conversation (with up to 20 initial items), retrieve, update its metadata and
delete it; add items (up to 20 a call), list them (`limit` 1-100, default 20; `order` `asc` or
`desc`, default `desc`; `after` an item id, cursor pagination), retrieve and delete one. A
Responses request with `conversation` reads the conversation's items before its `input`, and
its input and output items are added to the conversation once it completed (as OpenAI does).

Items are stored in the shape the API lists them, each with an id and `status: "completed"`
(but `compaction` items, which have none): a message's string content becomes one `input_text`
part (`output_text` for the assistant); `function_call`, `function_call_output`, `reasoning`
and `compaction` items keep their fields. An item's own `id` is kept unless the conversation
holds it already. Items rltap cannot honour (hosted tool calls, `item_reference`) are refused
naming their type, as in `input`.

A store belongs to one session: another session's conversation id is unknown (404), so no
conversation leaks across sessions.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from rltap.protocols._validation import format_param
from rltap.protocols.openai_responses.input_items import (
    CompactionItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    InputMessage,
    ReasoningItem,
)
from rltap.record.errors import InvalidRequest, NotFound
from rltap.record.ids import random_hex

__all__ = [
    "ConversationCreateRequest",
    "ConversationItemsRequest",
    "ConversationStore",
    "ConversationUpdateRequest",
    "input_item_models",
    "list_body",
    "stored_items",
]

_LENIENT = ConfigDict(extra="allow")
# OpenAI's limit per call; a larger list is a 400, as there.
_MAX_ITEMS_PER_CALL = 20
_ITEM_ID_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "compaction": "cmp",
}
_INPUT_ITEMS = TypeAdapter(list[InputItem])


class ConversationCreateRequest(BaseModel):
    """`POST /v1/conversations`: optional initial items and metadata."""

    model_config = _LENIENT
    items: list[InputItem] | None = Field(default=None, max_length=_MAX_ITEMS_PER_CALL)
    metadata: dict[str, str] | None = None


class ConversationUpdateRequest(BaseModel):
    """`POST /v1/conversations/{id}`: new metadata."""

    model_config = _LENIENT
    metadata: dict[str, str]


class ConversationItemsRequest(BaseModel):
    """`POST /v1/conversations/{id}/items`: the items to add, in order."""

    model_config = _LENIENT
    items: list[InputItem] = Field(min_length=1, max_length=_MAX_ITEMS_PER_CALL)


def _content(message: InputMessage) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        kind = "output_text" if message.role == "assistant" else "input_text"
        part: dict[str, Any] = {"type": kind, "text": message.content}
        if kind == "output_text":
            part["annotations"] = []
        return [part]
    return [p.model_dump(exclude_none=True) for p in message.content]


def _stored(item: BaseModel, path: tuple[str | int, ...]) -> dict[str, Any]:
    """One input item in the conversation's stored shape, without its id."""
    if isinstance(item, InputMessage):
        body = {"type": "message", "role": item.role, "content": _content(item)}
    elif isinstance(item, FunctionCallItem | FunctionCallOutputItem | ReasoningItem):
        body = item.model_dump(exclude_none=True)
    elif isinstance(item, CompactionItem):  # the API's compaction items have no status
        return {k: v for k, v in item.model_dump(exclude_none=True).items() if k != "id"}
    else:
        kind = getattr(item, "type", None)
        msg = f"Items of type {kind!r} are not supported in a conversation."
        raise InvalidRequest(msg, param=format_param((*path, "type")))
    body.pop("id", None)
    body["status"] = "completed"
    return body


def stored_items(items: list[Any], param: str = "items") -> list[dict[str, Any]]:
    """Validated input items (models) as stored items, each keeping the `id` it came with."""
    stored = []
    for i, item in enumerate(items):
        body = _stored(item, (param, i))
        own_id = getattr(item, "id", None)
        stored.append({"id": own_id, **body} if isinstance(own_id, str) and own_id else body)
    return stored


def input_item_models(items: list[dict[str, Any]]) -> list[Any]:
    """Stored items (or output items) as the input item models a request's `input` holds."""
    return _INPUT_ITEMS.validate_python(items)


@dataclass(slots=True)
class _Conversation:
    id: str
    created_at: int
    metadata: dict[str, str]
    items: dict[str, dict[str, Any]] = field(default_factory=dict)  # by id, in order

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
        }


class ConversationStore:
    """One session's conversations.

    Usage:
        store = ConversationStore()
        conversation = store.create(stored_items(request.items or []), metadata={})
        store.add(conversation["id"], stored_items(more.items))
        page = store.list_items(conversation["id"], limit=20, order="asc")
    """

    def __init__(self) -> None:
        self._conversations: dict[str, _Conversation] = {}
        self._lock = threading.Lock()

    def _get(self, conversation_id: str, param: str | None = None) -> _Conversation:
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            msg = f"Conversation with id '{conversation_id}' not found."
            raise NotFound(msg, param=param)
        return conversation

    def create(
        self, items: list[dict[str, Any]], metadata: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """A new conversation holding `items` (stored items); its body."""
        conversation = _Conversation(f"conv_{random_hex()}", int(time.time()), metadata or {})
        with self._lock:
            self._conversations[conversation.id] = conversation
            self._append(conversation, items)
        return conversation.body()

    def retrieve(self, conversation_id: str) -> dict[str, Any]:
        return self._get(conversation_id).body()

    def update(self, conversation_id: str, metadata: dict[str, str]) -> dict[str, Any]:
        with self._lock:
            conversation = self._get(conversation_id)
            conversation.metadata = dict(metadata)
            return conversation.body()

    def delete(self, conversation_id: str) -> dict[str, Any]:
        with self._lock:
            self._get(conversation_id)
            del self._conversations[conversation_id]
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    def add(
        self, conversation_id: str, items: list[dict[str, Any]], param: str | None = None
    ) -> list[dict[str, Any]]:
        """Append stored items (ids are given to those without one); the items as stored."""
        with self._lock:
            return self._append(self._get(conversation_id, param), items)

    def _append(
        self, conversation: _Conversation, items: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        added = []
        for item in items:
            item_id = item.get("id")
            if not isinstance(item_id, str) or item_id in conversation.items:
                item_id = f"{_ITEM_ID_PREFIX.get(item['type'], 'item')}_{random_hex()}"
            stored = {**item, "id": item_id}
            conversation.items[item_id] = stored
            added.append(stored)
        return added

    def items(self, conversation_id: str, param: str | None = None) -> list[dict[str, Any]]:
        """Every item of the conversation, oldest first."""
        with self._lock:
            return list(self._get(conversation_id, param).items.values())

    def list_items(
        self,
        conversation_id: str,
        *,
        limit: int = 20,
        order: Literal["asc", "desc"] = "desc",
        after: str | None = None,
    ) -> dict[str, Any]:
        """A page of items: `limit` of them in `order`, starting after the item `after`."""
        if not 1 <= limit <= 100:
            msg = f"Invalid 'limit': {limit}; it must be between 1 and 100."
            raise InvalidRequest(msg, param="limit")
        items = self.items(conversation_id)
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [item["id"] for item in items]
            if after not in ids:
                msg = f"Item with id '{after}' not found in conversation '{conversation_id}'."
                raise NotFound(msg, param="after")
            items = items[ids.index(after) + 1 :]
        page = items[:limit]
        return list_body(page, has_more=len(items) > limit)

    def retrieve_item(self, conversation_id: str, item_id: str) -> dict[str, Any]:
        with self._lock:
            conversation = self._get(conversation_id)
            return _item_of(conversation, item_id)

    def delete_item(self, conversation_id: str, item_id: str) -> dict[str, Any]:
        """Remove one item; the conversation's body, as OpenAI answers."""
        with self._lock:
            conversation = self._get(conversation_id)
            _item_of(conversation, item_id)
            del conversation.items[item_id]
            return conversation.body()


def _item_of(conversation: _Conversation, item_id: str) -> dict[str, Any]:
    item = conversation.items.get(item_id)
    if item is None:
        msg = f"Item with id '{item_id}' not found in conversation '{conversation.id}'."
        raise NotFound(msg, param="item_id")
    return item


def list_body(items: list[dict[str, Any]], *, has_more: bool = False) -> dict[str, Any]:
    """A `list` object of conversation items."""
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": has_more,
    }
