"""Errors on the wire: each `RltapError` as the API's own error body with its status code.

/v1/messages answers in Anthropic's envelope `{"type": "error", "error": {"type", "message"}}`;
every other route in OpenAI's `{"error": {"message", "type", "param", "code"}}`. A 429 carries
`Retry-After`. Anything unexpected is logged and answered 500 in the same envelope, never as a
traceback.
"""

from __future__ import annotations

import logging
import math

import orjson
from fastapi import FastAPI, Request, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from rltap.errors import CapacityExhausted, InvalidRequest, NotFound, RltapError
from rltap.protocols import anthropic_messages, openai_chat

__all__ = ["error_response", "install_error_handlers"]

logger = logging.getLogger("rltap.proxy")


def error_response(path: str, exc: RltapError) -> Response:
    if path.startswith("/v1/messages"):
        body = anthropic_messages.error_body(exc)
    else:
        body = openai_chat.error_body(exc)
    headers = {}
    if isinstance(exc, CapacityExhausted):
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after)))
    return Response(
        orjson.dumps(body),
        status_code=exc.status_code,
        media_type="application/json",
        headers=headers,
    )


def _from_http_exception(exc: StarletteHTTPException) -> RltapError:
    if exc.status_code == 404:
        return NotFound(f"no route {exc.detail}" if exc.detail != "Not Found" else "no such route")
    error = InvalidRequest(str(exc.detail))
    error.status_code = exc.status_code
    return error


def install_error_handlers(app: FastAPI) -> None:
    async def on_rltap_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RltapError)
        return error_response(request.url.path, exc)

    async def on_http_exception(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(request.url.path, _from_http_exception(exc))

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        logger.exception("unexpected error on %s", request.url.path)
        return error_response(request.url.path, RltapError(f"internal error: {type(exc).__name__}"))

    app.add_exception_handler(RltapError, on_rltap_error)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
    app.add_exception_handler(Exception, on_unexpected)
