"""`POST /v1/responses` with `conversation`: the conversation's items before the input, and
the input and output items added to it once the response completed (as OpenAI does).

This is the Responses spec's `in_session` (`rltap.protocols.spec.ApiSpec`): the proxy's route
and the direct client both call it, with the caller's session.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from rltap.protocols.openai_responses.conversations import input_item_models, stored_items
from rltap.protocols.openai_responses.input_items import input_messages
from rltap.protocols.openai_responses.operations import API, conversation_store
from rltap.protocols.openai_responses.request import ResponsesRequest, to_canonical
from rltap.protocols.openai_responses.response import output_items
from rltap.protocols.operation import OnDone, SessionPort
from rltap.record.errors import InvalidRequest, NotFound
from rltap.record.generation import CanonicalRequest, Generation

__all__ = ["with_conversation"]

_INPUT_INDEX = re.compile(r"^input\[(\d+)\]")


def _conversation_id(value: str | dict[str, Any]) -> str:
    conversation_id = value.get("id") if isinstance(value, dict) else value
    if not isinstance(conversation_id, str) or not conversation_id:
        msg = "'conversation' must be a conversation id or an object with its 'id'."
        raise InvalidRequest(msg, param="conversation")
    return conversation_id


def with_conversation(
    body: ResponsesRequest, session: SessionPort
) -> tuple[CanonicalRequest, OnDone | None]:
    """The canonical request of `body`; with `conversation`, the conversation's items come
    first, and the callback adds the new items once it completed."""
    if body.conversation is None:
        return to_canonical(body), None
    if body.previous_response_id is not None:
        msg = "'previous_response_id' and 'conversation' cannot be used together."
        raise InvalidRequest(msg, param="conversation")
    conversation_id = _conversation_id(body.conversation)
    store = conversation_store(session)
    history = input_item_models(store.items(conversation_id, param="conversation"))
    sent = [{"role": "user", "content": body.input}] if isinstance(body.input, str) else None
    own = input_item_models(sent) if sent is not None else list(body.input or [])
    # The client's own items alone first, so that an error names them as the client sent them.
    input_messages(own, [])
    new_items = stored_items(own, "input")
    wire = body.model_copy(update={"input": [*history, *own], "conversation": None})
    canonical = to_canonical(wire)
    canonical.unsupported_content = [
        replace(part, param=_own_path(part.param, len(history)))
        for part in canonical.unsupported_content
    ]
    canonical.echo["conversation"] = {"id": conversation_id}
    return canonical, _adder(session, conversation_id, canonical, new_items)


def _own_path(param: str, history: int) -> str:
    """A path into the history-then-input list as the client knows it: `conversation` for the
    conversation's items, `input[i]...` counted from the client's first item."""
    match = _INPUT_INDEX.match(param)
    if match is None:
        return param
    index = int(match.group(1)) - history
    return "conversation" if index < 0 else f"input[{index}]{param[match.end() :]}"


def _adder(
    session: SessionPort,
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
        interaction = session.cache.get(generation.interaction_id)
        kept = None if interaction is None else interaction.reply_bodies.get(API)
        outputs = kept["output"] if kept else output_items(canonical, generation)
        try:
            conversation_store(session).add(conversation_id, [*new_items, *outputs])
        except NotFound:  # deleted while the response ran: there is nothing to add to
            return

    return add_to_conversation
