"""The Anthropic Messages API (`POST /v1/messages`): requests in, Message bodies and events out.

Usage:
    request = parse_request(body)                      # -> CanonicalRequest (InvalidRequest)
    build_response(request, generations)               # -> the Message body
    encoder = StreamEncoder(request)                   # streaming: encode / finish / error
    error_body(exc)                                    # -> {"type": "error", "error": {...}}

See `request` for how content blocks become canonical messages, `response` for the choices made
where the API leaves room (signatures, tool_use ids, stop reasons, error types) and `stream` for
the event sequence; `count_tokens` the spec's one other route.
"""

from __future__ import annotations

from rltap.protocols.anthropic_messages.count_tokens import COUNT_TOKENS
from rltap.protocols.anthropic_messages.request import MessageCreateParams, to_canonical
from rltap.protocols.anthropic_messages.response import ID_PREFIX, build_response, error_body
from rltap.protocols.anthropic_messages.stream import StreamEncoder
from rltap.protocols.spec import ApiSpec

__all__ = [
    "ID_PREFIX",
    "SPEC",
    "MessageCreateParams",
    "StreamEncoder",
    "build_response",
    "error_body",
    "parse_request",
]

SPEC = ApiSpec(
    name="messages",
    title="Anthropic Messages",
    paths=("/v1/messages",),
    request_model=MessageCreateParams,
    to_canonical=to_canonical,
    build_response=build_response,
    stream_encoder=StreamEncoder,
    error_body=error_body,
    id_prefix=ID_PREFIX,
    operations=(COUNT_TOKENS,),
)


# `parse_request(body)`: a Messages body as a `CanonicalRequest`, or `InvalidRequest` (400).
parse_request = SPEC.parse
