"""What every route of the proxy shares: how bodies are read, and who may call.

`JsonBodyRoute` is the route class of all routers: a body is parsed once by `parse_json`
(orjson, the nesting limit, a JSON object or nothing), so a malformed body is rltap's own 400
in the API's envelope, and FastAPI then validates the parsed object against the route's pydantic
model. A body is JSON whatever its content type says. The dependencies `require_admin`
and `session_record` check the key (`Authorization: Bearer` or `x-api-key`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.routing import APIRoute
from starlette.datastructures import MutableHeaders

from rltap.json_body import parse_json
from rltap.proxy.requests import request_key
from rltap.proxy.state import ProxyState, SessionRecord

__all__ = [
    "AdminKey",
    "JsonBodyRoute",
    "JsonRequest",
    "Record",
    "State",
    "proxy_state",
    "require_admin",
    "session_record",
]


class JsonRequest(Request):
    """A request whose `json()` is `parse_json` of its body (an empty body is `{}`)."""

    _parsed: Any = None

    async def json(self) -> Any:
        if self._parsed is None:
            self._parsed = parse_json(await self.body(), allow_empty=True)
        return self._parsed


class JsonBodyRoute(APIRoute):
    """An `APIRoute` whose body, when it has one, is parsed by `JsonRequest` before FastAPI runs
    the endpoint, so parse errors are `InvalidRequest`s and reach rltap's error handlers."""

    def get_route_handler(self) -> Any:
        handle = super().get_route_handler()
        has_body = self.body_field is not None

        async def parse_then_handle(request: Request) -> Response:
            json_request = JsonRequest(request.scope, request.receive)
            if has_body:
                await json_request.json()
                # Parsed as JSON whatever the client labelled it (`curl -d` says a form, some
                # clients octet-stream), as rltap always has: FastAPI reads the label.
                MutableHeaders(scope=request.scope)["content-type"] = "application/json"
            response: Response = await handle(json_request)
            return response

        return parse_then_handle


# Dependencies are coroutines: FastAPI would run a plain function in a worker thread.
async def proxy_state(request: Request) -> ProxyState:
    """The state of the app serving `request`."""
    state: ProxyState = request.app.state.rltap
    return state


State = Annotated[ProxyState, Depends(proxy_state)]


async def require_admin(request: Request, state: State) -> None:
    """The admin key, or 401/403."""
    state.store.require_admin(request_key(request))


async def session_record(request: Request, state: State) -> SessionRecord:
    """The active session of the request's session key, or 401/403/410."""
    return state.store.session_for_key(request_key(request))


AdminKey = Depends(require_admin)
Record = Annotated[SessionRecord, Depends(session_record)]
