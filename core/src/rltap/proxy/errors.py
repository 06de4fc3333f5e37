"""Errors on the wire: each `RltapError` as the API's own error body with its status code.

/v1/messages answers in Anthropic's envelope `{"type": "error", "error": {"type", "message"}}`;
every other route in OpenAI's `{"error": {"message", "type", "param", "code"}}`. A 429 carries
`Retry-After`. Anything unexpected is logged and answered 500 in the same envelope, never as a
traceback. `error_reply` builds the bytes once, for the FastAPI handlers and for the raw ASGI
generation endpoint alike.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import orjson
from fastapi import FastAPI, Request, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from rltap.errors import CapacityExhausted, InvalidRequest, NotFound, RltapError
from rltap.protocols import anthropic_messages, openai_chat

__all__ = [
    "ErrorReply",
    "error_reply",
    "error_response",
    "http_error",
    "install_error_handlers",
    "internal_error",
]

logger = logging.getLogger("rltap.proxy")


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An error response as ASGI sends it: status, raw header pairs and the JSON body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def error_reply(path: str, exc: RltapError) -> ErrorReply:
    if path.startswith("/v1/messages"):
        body = orjson.dumps(anthropic_messages.error_body(exc))
    else:
        body = orjson.dumps(openai_chat.error_body(exc))
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    if isinstance(exc, CapacityExhausted):
        headers.append((b"retry-after", str(max(1, math.ceil(exc.retry_after))).encode()))
    return ErrorReply(exc.status_code, headers, body)


def error_response(path: str, exc: RltapError) -> Response:
    reply = error_reply(path, exc)
    response = Response(reply.body, status_code=reply.status)
    response.raw_headers = reply.headers
    return response


def http_error(status_code: int, detail: str) -> RltapError:
    """A routing refusal (unknown route, wrong method) as an `RltapError` with that status."""
    if status_code == 404:
        return NotFound(f"no route {detail}" if detail != "Not Found" else "no such route")
    error = InvalidRequest(detail)
    error.status_code = status_code
    return error


def internal_error(path: str, exc: BaseException) -> RltapError:
    """Log what went wrong unexpectedly; the client gets a 500 without the traceback."""
    logger.error("unexpected error on %s", path, exc_info=exc)
    return RltapError(f"internal error: {type(exc).__name__}")


def install_error_handlers(app: FastAPI) -> None:
    async def on_rltap_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RltapError)
        return error_response(request.url.path, exc)

    async def on_http_exception(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(request.url.path, http_error(exc.status_code, str(exc.detail)))

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        return error_response(request.url.path, internal_error(request.url.path, exc))

    app.add_exception_handler(RltapError, on_rltap_error)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
    app.add_exception_handler(Exception, on_unexpected)
