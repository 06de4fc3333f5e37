"""What every route of the proxy shares: who may call it, and how its body is read.

The generation routes check the session key with `session_of` and parse with `parse_json`
themselves (`rltap.proxy.generation`); the control routes through their route class. Each
router's route class says which key its routes need, checked before the body is read (a
client without the right key learns nothing about its body, and sends no large body in vain):
`OpenRoute` none, `AdminRoute` the admin key, `SessionRoute` a live session's key, whose record
the endpoint then finds with `caller_session`. Keys come as `Authorization: Bearer` or
`x-api-key`. The check is a plain call, not a FastAPI dependency, whose machinery costs a
quarter of a generation request's time in the proxy.

A body is parsed once by `parse_json` (orjson, the nesting limit, a JSON object or nothing), so
a malformed body is rltap's own 400 in the API's envelope; FastAPI then validates the parsed
object against the route's pydantic model. A body is JSON whatever its content type says.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.datastructures import MutableHeaders

from rltap.proxy.requests import request_key
from rltap.proxy.state import ProxyState, SessionRecord
from rltap.session.json_body import parse_json

__all__ = [
    "AdminRoute",
    "JsonRequest",
    "OpenRoute",
    "SessionRoute",
    "caller_session",
    "json_response",
    "proxy_state",
    "session_of",
]


class JsonRequest(Request):
    """A request whose `json()` is `parse_json` of its body (an empty body is `{}`)."""

    _parsed: Any = None

    async def json(self) -> Any:
        if self._parsed is None:
            self._parsed = parse_json(await self.body(), allow_empty=True)
        return self._parsed


class OpenRoute(APIRoute):
    """A route anyone may call; its body, when it has one, is parsed by `JsonRequest` before
    FastAPI validates it, so parse errors are `InvalidRequest`s for rltap's error handlers."""

    def check_key(self, request: Request) -> None:
        """Refuse a caller without the route's key (401/403/410); open routes need none."""

    def get_route_handler(self) -> Any:
        handle = super().get_route_handler()
        has_body = self.body_field is not None

        async def check_then_handle(request: Request) -> Response:
            self.check_key(request)
            json_request = JsonRequest(request.scope, request.receive)
            if has_body:
                await json_request.json()
                # Parsed as JSON whatever the client labelled it (`curl -d` says a form, some
                # clients octet-stream), as rltap always has: FastAPI reads the label.
                MutableHeaders(scope=request.scope)["content-type"] = "application/json"
            response: Response = await handle(json_request)
            return response

        return check_then_handle


class AdminRoute(OpenRoute):
    """A route for the admin key."""

    def check_key(self, request: Request) -> None:
        proxy_state(request).store.require_admin(request_key(request))


class SessionRoute(OpenRoute):
    """A route for a live session's key; `caller_session(request)` is that session."""

    def check_key(self, request: Request) -> None:
        request.state.rltap_session = session_of(request)


def proxy_state(request: Request) -> ProxyState:
    """The state of the app serving `request`."""
    state: ProxyState = request.app.state.rltap
    return state


def session_of(request: Request) -> SessionRecord:
    """The live session whose key the request came with, or 401/403/410."""
    return proxy_state(request).store.session_for_key(request_key(request))


def caller_session(request: Request) -> SessionRecord:
    """The session whose key a `SessionRoute` request came with."""
    record: SessionRecord = request.state.rltap_session
    return record


def json_response(body: Any, status_code: int = 200) -> Response:
    """A JSON body (orjson) with the JSON media type: what every proxy route answers."""
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")
