"""The Anthropic Messages API (`POST /v1/messages`): requests in, Message bodies and events out.

    request = parse_request(body)                      # -> CanonicalRequest (InvalidRequest)
    build_response(request, generations)               # -> the Message body
    encoder = StreamEncoder(request)                   # streaming: encode / finish / error
    error_body(exc)                                    # -> {"type": "error", "error": {...}}

See `request` for how content blocks become canonical messages, `response` for the choices made
where the API leaves room (signatures, tool_use ids, stop reasons, error types) and `stream` for
the event sequence.
"""

from __future__ import annotations

from rltap.protocols.anthropic_messages.request import MessageCreateParams, parse_request
from rltap.protocols.anthropic_messages.response import ID_PREFIX, build_response, error_body
from rltap.protocols.anthropic_messages.stream import StreamEncoder

__all__ = [
    "ID_PREFIX",
    "MessageCreateParams",
    "StreamEncoder",
    "build_response",
    "error_body",
    "parse_request",
]
