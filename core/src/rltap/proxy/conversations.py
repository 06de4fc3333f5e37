"""The Responses API's server-side state: stored responses and conversations, per session.

- `GET /v1/responses/{id}`: a response of the caller's session, as it was answered (the body a
  stream ended with, for a streamed one); an unknown id, an unfinished response or another
  session's is a 404 in OpenAI's envelope, the same answer for all three, so nothing leaks.
- `POST /v1/responses/compact`: the model summarises the conversation, a generation recorded
  in the session (`rltap.protocols.openai_responses.compaction`).
- The Conversations API subset of `rltap.protocols.openai_responses.conversations`, the store
  being the caller session's own.
- `POST /v1/responses` with `conversation`: `with_conversation` puts the conversation's items
  before the input and, once the response completed, adds the input and output items to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from rltap.generation import CanonicalRequest, Generation
from rltap.protocols import ApiSpec
from rltap.protocols.openai_responses import ResponsesRequest
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
    input_item_models,
    list_body,
    stored_items,
)
from rltap.protocols.openai_responses.input_items import input_messages
from rltap.protocols.openai_responses.response import output_items
from rltap.proxy.routing import SessionRoute, caller_session, json_response, proxy_state
from rltap.proxy.state import SessionRecord
from rltap.record.errors import InvalidRequest, NotFound

__all__ = ["ROUTER", "with_conversation"]

ROUTER = APIRouter(route_class=SessionRoute)
_CONVERSATION = "/v1/conversations/{conversation_id}"
_INPUT_INDEX = re.compile(r"^input\[(\d+)\]")

OnDone = Callable[[list[Generation]], None]


def _store(request: Request) -> ConversationStore:
    return caller_session(request).conversations


@ROUTER.get("/v1/responses/{response_id}")
async def retrieve_response(request: Request, response_id: str) -> Response:
    interaction = caller_session(request).session.cache.get(response_id)
    body = None if interaction is None or not interaction.is_complete else interaction.response
    if body is None:
        msg = f"Response with id '{response_id}' not found."
        raise NotFound(msg, param="response_id")
    return json_response(body)


@ROUTER.post("/v1/responses/compact")
async def compact(request: Request, body: CompactRequest) -> Response:
    record = caller_session(request)
    canonical = compaction_request(body)
    record.call_started()  # an export waits for it, as for any generation
    try:
        (generation,) = await record.session.generate(canonical)
    finally:
        record.call_finished()
        proxy_state(request).store.touch(record)
    prompt = record.session.cache[generation.interaction_id].messages
    return json_response(compacted_body(prompt, generation))


@ROUTER.post("/v1/conversations")
async def create_conversation(
    request: Request, body: ConversationCreateRequest | None = None
) -> Response:
    body = body or ConversationCreateRequest()
    items = stored_items(body.items or [])
    return json_response(_store(request).create(items, body.metadata))


@ROUTER.get(_CONVERSATION)
async def retrieve_conversation(request: Request, conversation_id: str) -> Response:
    return json_response(_store(request).retrieve(conversation_id))


@ROUTER.post(_CONVERSATION)
async def update_conversation(
    request: Request, conversation_id: str, body: ConversationUpdateRequest
) -> Response:
    return json_response(_store(request).update(conversation_id, body.metadata))


@ROUTER.delete(_CONVERSATION)
async def delete_conversation(request: Request, conversation_id: str) -> Response:
    return json_response(_store(request).delete(conversation_id))


@ROUTER.post(_CONVERSATION + "/items")
async def add_items(
    request: Request, conversation_id: str, body: ConversationItemsRequest
) -> Response:
    added = _store(request).add(conversation_id, stored_items(body.items))
    return json_response(list_body(added))


@ROUTER.get(_CONVERSATION + "/items")
async def list_items(
    request: Request,
    conversation_id: str,
    limit: int = Query(default=20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> Response:
    page = _store(request).list_items(conversation_id, limit=limit, order=order, after=after)
    return json_response(page)


@ROUTER.get(_CONVERSATION + "/items/{item_id}")
async def retrieve_item(request: Request, conversation_id: str, item_id: str) -> Response:
    return json_response(_store(request).retrieve_item(conversation_id, item_id))


@ROUTER.delete(_CONVERSATION + "/items/{item_id}")
async def delete_item(request: Request, conversation_id: str, item_id: str) -> Response:
    return json_response(_store(request).delete_item(conversation_id, item_id))


def _conversation_id(value: str | dict[str, Any]) -> str:
    conversation_id = value.get("id") if isinstance(value, dict) else value
    if not isinstance(conversation_id, str) or not conversation_id:
        msg = "'conversation' must be a conversation id or an object with its 'id'."
        raise InvalidRequest(msg, param="conversation")
    return conversation_id


def with_conversation(
    spec: ApiSpec, body: BaseModel, record: SessionRecord
) -> tuple[CanonicalRequest, OnDone | None]:
    """The canonical request of `body`; for a Responses body with `conversation`, the
    conversation's items come first, and the callback adds the new items once it completed."""
    if not isinstance(body, ResponsesRequest) or body.conversation is None:
        return spec.to_canonical(body), None
    if body.previous_response_id is not None:
        msg = "'previous_response_id' and 'conversation' cannot be used together."
        raise InvalidRequest(msg, param="conversation")
    conversation_id = _conversation_id(body.conversation)
    history = input_item_models(record.conversations.items(conversation_id, param="conversation"))
    sent = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else None
    own = input_item_models(sent) if sent is not None else list(body.input or [])
    # The client's own items alone first, so that an error names them as the client sent them.
    input_messages(own, [])
    new_items = stored_items(own, "input")
    wire = body.model_copy(update={"input": [*history, *own], "conversation": None})
    canonical = spec.to_canonical(wire)
    canonical.unsupported_content = [
        replace(part, param=_own_path(part.param, len(history)))
        for part in canonical.unsupported_content
    ]
    canonical.echo["conversation"] = {"id": conversation_id}
    return canonical, _adder(record, conversation_id, canonical, new_items)


def _own_path(param: str, history: int) -> str:
    """A path into the history-then-input list as the client knows it: `conversation` for the
    conversation's items, `input[i]...` counted from the client's first item."""
    match = _INPUT_INDEX.match(param)
    if match is None:
        return param
    index = int(match.group(1)) - history
    return "conversation" if index < 0 else f"input[{index}]{param[match.end() :]}"


def _adder(
    record: SessionRecord,
    conversation_id: str,
    canonical: CanonicalRequest,
    new_items: list[dict[str, Any]],
) -> OnDone:
    def add_to_conversation(generations: list[Generation]) -> None:
        completed = [g for g in generations if g.finish_reason != "abort"]
        if not completed:  # a failed or aborted response adds nothing, as at OpenAI
            return
        generation = completed[0]
        # A stream's final body is kept by now (its items, in streamed order); a JSON body is
        # built from the same `output_items` after this runs.
        interaction = record.session.cache.get(generation.interaction_id)
        kept = None if interaction is None else interaction.response
        outputs = kept["output"] if kept else output_items(canonical, generation)
        try:
            record.conversations.add(conversation_id, [*new_items, *outputs])
        except NotFound:  # deleted while the response ran: there is nothing to add to
            return

    return add_to_conversation
