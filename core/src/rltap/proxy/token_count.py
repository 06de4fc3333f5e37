"""`POST /v1/messages/count_tokens`: Anthropic's token count of a Messages request.

The count is exact: the request's prompt as its `/v1/messages` call would render it in the
caller's session (`Session.count_tokens`: the same history, parent, chat template and tools), so
it equals that call's `usage.input_tokens`. Nothing is generated or recorded. The body is a
Messages body (`max_tokens` and the sampling fields may be left out); the key is a session's, as
on `/v1/messages`; the reply is Anthropic's `{"input_tokens": N}`. CAMEL's Anthropic backend
calls it before every step, the anthropic SDK as `client.messages.count_tokens(...)`.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from rltap.protocols.anthropic_messages import SPEC, MessageCreateParams
from rltap.proxy.requests import request_agent
from rltap.proxy.routing import SessionRoute, caller_session, json_response

__all__ = ["TOKEN_COUNT_ROUTER"]

TOKEN_COUNT_ROUTER = APIRouter(route_class=SessionRoute)


@TOKEN_COUNT_ROUTER.post("/v1/messages/count_tokens", summary="Anthropic Messages: count tokens")
async def count_tokens(request: Request, body: MessageCreateParams) -> Response:
    record = caller_session(request)
    canonical = SPEC.to_canonical(body)
    canonical.agent = request_agent(request)
    count = record.session.count_tokens(canonical)
    return json_response({"input_tokens": count})
