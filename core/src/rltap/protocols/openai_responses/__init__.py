"""OpenAI Responses (`POST /v1/responses`): requests in, `response` bodies and events out.

Usage:
    from rltap.protocols import openai_responses as proto

    request = proto.parse_request(body)                  # CanonicalRequest, or InvalidRequest
    body = proto.build_response(request, generations)    # a `response` object
    encoder = proto.StreamEncoder(request)               # response.* semantic events

See `request`, `response` and `stream` for the decisions the API leaves open.
"""

from __future__ import annotations

from rltap.protocols.openai_responses.request import ResponsesRequest, parse_request
from rltap.protocols.openai_responses.response import ID_PREFIX, build_response, error_body
from rltap.protocols.openai_responses.stream import StreamEncoder

__all__ = [
    "ID_PREFIX",
    "ResponsesRequest",
    "StreamEncoder",
    "build_response",
    "error_body",
    "parse_request",
]
