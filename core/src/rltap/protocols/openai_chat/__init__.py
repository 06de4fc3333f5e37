"""OpenAI Chat Completions (`POST /v1/chat/completions`): requests in, bodies and chunks out.

Usage:
    from rltap.protocols import openai_chat as proto

    request = proto.parse_request(body)                  # CanonicalRequest, or InvalidRequest
    body = proto.build_response(request, generations)    # chat.completion
    encoder = proto.StreamEncoder(request)               # chat.completion.chunk events

See `request`, `response` and `stream` for the decisions the API leaves open.
"""

from __future__ import annotations

from rltap.protocols.openai_chat.request import ChatCompletionRequest, to_canonical
from rltap.protocols.openai_chat.response import ID_PREFIX, build_response, error_body
from rltap.protocols.openai_chat.stream import StreamEncoder
from rltap.protocols.spec import ApiSpec

__all__ = [
    "ID_PREFIX",
    "SPEC",
    "ChatCompletionRequest",
    "StreamEncoder",
    "build_response",
    "error_body",
    "parse_request",
]

SPEC = ApiSpec(
    name="chat",
    title="OpenAI Chat Completions",
    paths=("/v1/chat/completions", "/chat/completions"),
    request_model=ChatCompletionRequest,
    to_canonical=to_canonical,
    build_response=build_response,
    stream_encoder=StreamEncoder,
    error_body=error_body,
    id_prefix=ID_PREFIX,
)


# `parse_request(body)`: a Chat Completions body as a `CanonicalRequest`, or `InvalidRequest` (400).
parse_request = SPEC.parse
