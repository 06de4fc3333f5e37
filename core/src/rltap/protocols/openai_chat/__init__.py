"""OpenAI Chat Completions (`POST /v1/chat/completions`): requests in, bodies and chunks out.

Usage:
    from rltap.protocols import openai_chat as proto

    request = proto.parse_request(body)                  # CanonicalRequest, or InvalidRequest
    body = proto.build_response(request, generations)    # chat.completion
    encoder = proto.StreamEncoder(request)               # chat.completion.chunk events

See `request`, `response` and `stream` for the decisions the API leaves open.
"""

from __future__ import annotations

from rltap.protocols.openai_chat.request import ChatCompletionRequest, parse_request
from rltap.protocols.openai_chat.response import ID_PREFIX, build_response, error_body
from rltap.protocols.openai_chat.stream import StreamEncoder

__all__ = [
    "ID_PREFIX",
    "ChatCompletionRequest",
    "StreamEncoder",
    "build_response",
    "error_body",
    "parse_request",
]
