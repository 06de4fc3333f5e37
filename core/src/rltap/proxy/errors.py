"""Errors on the wire: each `RltapError` as the API's own error body with its status code.

A route of a wire API (`rltap.protocols`) answers in that API's envelope (Anthropic's
`{"type": "error", "error": {"type", "message"}}` on /v1/messages and below); every other route
in OpenAI's `{"error": {"message", "type", "param", "code"}}`. A body FastAPI found invalid is a
400 naming the parameter. A 429 carries `Retry-After`. Anything unexpected is logged and answered
500 in the same envelope, never as a traceback.
"""

from __future__ import annotations

import logging
import math

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from rltap.protocols import SPECS, spec_for_path
from rltap.protocols._validation import errors_to_invalid_request
from rltap.record.errors import CapacityExhausted, InvalidRequest, NotFound, RltapError

__all__ = ["CLIENT_CLOSED", "error_response", "http_error", "install_error_handlers"]

logger = logging.getLogger("rltap.proxy")
# nginx's status for a client that hung up before its reply: counted, never sent.
CLIENT_CLOSED = 499


def error_response(path: str, exc: RltapError) -> Response:
    """`exc` in the envelope of the API that `path` belongs to (OpenAI's for other routes)."""
    spec = spec_for_path(path) or SPECS["chat"]
    headers = {}
    if isinstance(exc, CapacityExhausted):
        headers["retry-after"] = str(max(1, math.ceil(exc.retry_after)))
    body = orjson.dumps(spec.error_body(exc))
    return Response(body, exc.status_code, headers, media_type="application/json")


def http_error(status_code: int, detail: str) -> RltapError:
    """A routing refusal (unknown route, wrong method) as an `RltapError` with that status."""
    if status_code == 404:
        return NotFound(f"no route {detail}" if detail != "Not Found" else "no such route")
    error = InvalidRequest(detail)
    error.status_code = status_code
    return error


def _body_errors(exc: RequestValidationError) -> InvalidRequest:
    errors = [
        {**error, "loc": tuple(error["loc"])[1:]}  # FastAPI's locations start with "body"
        for error in exc.errors()
    ]
    return errors_to_invalid_request(errors)


def install_error_handlers(app: FastAPI) -> None:
    async def on_rltap_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RltapError)
        return error_response(request.url.path, exc)

    async def on_invalid_body(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(request.url.path, _body_errors(exc))

    async def on_http_exception(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(request.url.path, http_error(exc.status_code, str(exc.detail)))

    async def on_client_gone(request: Request, exc: Exception) -> Response:
        return Response(status_code=CLIENT_CLOSED)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        logger.error("unexpected error on %s", request.url.path, exc_info=exc)
        error = RltapError(f"internal error: {type(exc).__name__}")
        return error_response(request.url.path, error)

    app.add_exception_handler(RltapError, on_rltap_error)
    app.add_exception_handler(RequestValidationError, on_invalid_body)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
    app.add_exception_handler(ClientDisconnect, on_client_gone)
    app.add_exception_handler(Exception, on_unexpected)
