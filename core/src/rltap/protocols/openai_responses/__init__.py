"""OpenAI Responses (`POST /v1/responses`): requests in, `response` bodies and events out.

Usage:
    from rltap.protocols import openai_responses as proto

    request = proto.parse_request(body)                  # CanonicalRequest, or InvalidRequest
    body = proto.build_response(request, generations)    # a `response` object
    encoder = proto.StreamEncoder(request)               # response.* semantic events

Errors use OpenAI's envelope, the same as Chat Completions'. See `request`, `response` and
`stream` for the decisions the API leaves open. What OpenAI keeps on its server, conversations
and their items (`conversations`), compaction (`compaction`) and stored responses, are the
spec's operations on the caller's session (`operations`, `in_conversation`), which the proxy and
`DirectOpenAI` both serve.
"""

from __future__ import annotations

from rltap.protocols.openai_chat.response import error_body
from rltap.protocols.openai_responses.conversations import ConversationStore
from rltap.protocols.openai_responses.in_conversation import with_conversation
from rltap.protocols.openai_responses.operations import API, OPERATIONS
from rltap.protocols.openai_responses.request import ResponsesRequest, to_canonical
from rltap.protocols.openai_responses.response import ID_PREFIX, build_response
from rltap.protocols.openai_responses.stream import StreamEncoder
from rltap.protocols.spec import ApiSpec

__all__ = [
    "ID_PREFIX",
    "SPEC",
    "ResponsesRequest",
    "StreamEncoder",
    "build_response",
    "error_body",
    "parse_request",
]

SPEC = ApiSpec(
    name=API,
    title="OpenAI Responses",
    paths=("/v1/responses", "/responses"),
    request_model=ResponsesRequest,
    to_canonical=to_canonical,
    build_response=build_response,
    stream_encoder=StreamEncoder,
    error_body=error_body,
    id_prefix=ID_PREFIX,
    operations=OPERATIONS,
    session_state=ConversationStore,
    in_session=with_conversation,
)


# `parse_request(body)`: a Responses body as a `CanonicalRequest`, or `InvalidRequest` (400).
parse_request = SPEC.parse
