"""What the Responses API keeps on its server, as operations on the caller's session.

- `GET /v1/responses/{id}`: a response of the caller's session, as it was answered (the body a
  stream ended with, for a streamed one); an unknown id, an unfinished response or another
  session's is a 404 in OpenAI's envelope, the same answer for all three, so nothing leaks.
- `POST /v1/responses/compact`: the model summarises the conversation, a generation recorded
  in the session (`compaction`).
- The Conversations API subset of `conversations`, the store being the session's own
  (`Session.api_state("responses")`).

The proxy serves them as routes and `DirectOpenAI` in process (`rltap.protocols.operation`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rltap.protocols.openai_responses.compaction import (
    CompactRequest,
    compacted_body,
    compaction_request,
)
from rltap.protocols.openai_responses.conversations import (
    ConversationCreateRequest,
    ConversationItemsRequest,
    ConversationStore,
    ConversationUpdateRequest,
    list_body,
    stored_items,
)
from rltap.protocols.operation import Operation, OperationCall, SessionPort
from rltap.record.errors import NotFound

__all__ = ["API", "OPERATIONS", "ListItemsQuery", "conversation_store"]

API = "responses"
_CONVERSATION = "/v1/conversations/{conversation_id}"
_ITEM = _CONVERSATION + "/items/{item_id}"


class ListItemsQuery(BaseModel):
    """`GET /v1/conversations/{id}/items`: a page's size, order and cursor (the store checks
    the size's bounds, 1-100)."""

    model_config = ConfigDict(extra="allow")
    limit: int = 20
    order: Literal["asc", "desc"] = "desc"
    after: str | None = None


def conversation_store(session: SessionPort) -> ConversationStore:
    """The session's conversations."""
    store: ConversationStore = session.api_state(API)
    return store


async def _retrieve_response(call: OperationCall) -> dict[str, Any]:
    response_id = call.params["response_id"]
    interaction = call.session.cache.get(response_id)
    body: dict[str, Any] | None = None
    if interaction is not None and interaction.is_complete:
        body = interaction.reply_bodies.get(API)
    if body is None:
        msg = f"Response with id '{response_id}' not found."
        raise NotFound(msg, param="response_id")
    return body


async def _compact(call: OperationCall) -> dict[str, Any]:
    canonical = compaction_request(call.body)
    canonical.agent = call.agent
    (generation,) = await call.session.generate(canonical)
    prompt = call.session.cache[generation.interaction_id].messages
    return compacted_body(prompt, generation)


async def _create_conversation(call: OperationCall) -> dict[str, Any]:
    body: ConversationCreateRequest = call.body
    items = stored_items(body.items or [])
    return conversation_store(call.session).create(items, body.metadata)


async def _retrieve_conversation(call: OperationCall) -> dict[str, Any]:
    return conversation_store(call.session).retrieve(call.params["conversation_id"])


async def _update_conversation(call: OperationCall) -> dict[str, Any]:
    body: ConversationUpdateRequest = call.body
    return conversation_store(call.session).update(call.params["conversation_id"], body.metadata)


async def _delete_conversation(call: OperationCall) -> dict[str, Any]:
    return conversation_store(call.session).delete(call.params["conversation_id"])


async def _add_items(call: OperationCall) -> dict[str, Any]:
    body: ConversationItemsRequest = call.body
    store = conversation_store(call.session)
    return list_body(store.add(call.params["conversation_id"], stored_items(body.items)))


async def _list_items(call: OperationCall) -> dict[str, Any]:
    query: ListItemsQuery = call.query
    return conversation_store(call.session).list_items(
        call.params["conversation_id"], limit=query.limit, order=query.order, after=query.after
    )


async def _retrieve_item(call: OperationCall) -> dict[str, Any]:
    store = conversation_store(call.session)
    return store.retrieve_item(call.params["conversation_id"], call.params["item_id"])


async def _delete_item(call: OperationCall) -> dict[str, Any]:
    store = conversation_store(call.session)
    return store.delete_item(call.params["conversation_id"], call.params["item_id"])


OPERATIONS = (
    Operation(
        method="POST",
        path="/v1/responses/compact",
        summary="OpenAI Responses: compact a conversation",
        handle=_compact,
        body=CompactRequest,
    ),
    Operation(
        method="GET",
        path="/v1/responses/{response_id}",
        summary="OpenAI Responses: retrieve a response",
        handle=_retrieve_response,
    ),
    Operation(
        method="POST",
        path="/v1/conversations",
        summary="OpenAI Conversations: create",
        handle=_create_conversation,
        body=ConversationCreateRequest,
    ),
    Operation(
        method="GET",
        path=_CONVERSATION,
        summary="OpenAI Conversations: retrieve",
        handle=_retrieve_conversation,
    ),
    Operation(
        method="POST",
        path=_CONVERSATION,
        summary="OpenAI Conversations: update",
        handle=_update_conversation,
        body=ConversationUpdateRequest,
    ),
    Operation(
        method="DELETE",
        path=_CONVERSATION,
        summary="OpenAI Conversations: delete",
        handle=_delete_conversation,
    ),
    Operation(
        method="POST",
        path=_CONVERSATION + "/items",
        summary="OpenAI Conversations: add items",
        handle=_add_items,
        body=ConversationItemsRequest,
    ),
    Operation(
        method="GET",
        path=_CONVERSATION + "/items",
        summary="OpenAI Conversations: list items",
        handle=_list_items,
        query=ListItemsQuery,
    ),
    Operation(
        method="GET",
        path=_ITEM,
        summary="OpenAI Conversations: retrieve an item",
        handle=_retrieve_item,
    ),
    Operation(
        method="DELETE",
        path=_ITEM,
        summary="OpenAI Conversations: delete an item",
        handle=_delete_item,
    ),
)
