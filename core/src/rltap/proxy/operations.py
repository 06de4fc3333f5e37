"""The APIs' other routes: every `Operation` of every registered spec, mounted as one route.

An operation is declared in its API's package (`rltap.protocols.operation`: method, path,
models, the handler on a session); here each becomes a thin route: the session key checked
before the body is read, the body parsed by `parse_json`, the query and path handed to
`Operation.run`, which validates and answers. They are plain Starlette routes (`ENDPOINTS`),
like the generation routes, and documented by FastAPI all the same (`DOCUMENTED`: routes
declared with the operations' models, never served). Errors reach the app's handlers
(`rltap.proxy.errors`), in the envelope of the API the path belongs to.

An operation runs as a call of its session: an export waits for it (compaction generates) and
the session's idle clock starts again when it is answered.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated

from fastapi import Body, Path, Query, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

from rltap.protocols import SPECS, Operation
from rltap.proxy.requests import request_agent
from rltap.proxy.routing import json_response, proxy_state, session_of
from rltap.session.json_body import parse_json

__all__ = ["DOCUMENTED", "ENDPOINTS", "documented_endpoint"]

Endpoint = Callable[[Request], Awaitable[Response]]


def _endpoint(operation: Operation) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        record = session_of(request)  # the key before the body
        body = None
        if operation.body is not None:
            body = parse_json(await request.body(), allow_empty=True)
        record.call_started()
        try:
            answer = await operation.run(
                record.session,
                request.path_params,
                query=request.query_params,
                body=body,
                agent=request_agent(request),
            )
        finally:
            record.call_finished()
            proxy_state(request).store.touch(record)
        return json_response(answer)

    return endpoint


def documented_endpoint(
    *,
    params: Sequence[str] = (),
    query: type[BaseModel] | None = None,
    body: type[BaseModel] | None = None,
) -> Callable[..., Awaitable[Response]]:
    """An endpoint whose signature declares these path parameters, query and body, for FastAPI
    to document a route that plain handlers serve (`ENDPOINTS` here and in `generation`)."""

    async def endpoint() -> Response:
        raise NotImplementedError  # never served: the plain handler serves the path

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [
        inspect.Parameter(name, keyword, annotation=Annotated[str, Path()]) for name in params
    ]
    if query is not None:
        in_query = Annotated[query, Query()]  # type: ignore[valid-type]
        parameters.append(inspect.Parameter("query", keyword, annotation=in_query))
    if body is not None:
        in_body = Annotated[body, Body()]  # type: ignore[valid-type]
        # A body with no required field may be left out (an empty body is `{}`).
        required = any(f.is_required() for f in body.model_fields.values())
        default = inspect.Parameter.empty if required else None
        parameters.append(inspect.Parameter("body", keyword, annotation=in_body, default=default))
    endpoint.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return endpoint


_OPERATIONS = [operation for spec in SPECS.values() for operation in spec.operations]
# (path, endpoint, method) of every operation, for `app.add_route(path, endpoint, [method])`.
ENDPOINTS = [(op.path, _endpoint(op), op.method) for op in _OPERATIONS]
DOCUMENTED = [
    APIRoute(
        op.path,
        documented_endpoint(params=op.params, query=op.query, body=op.body),
        methods=[op.method],
        summary=op.summary,
        response_class=Response,
    )
    for op in _OPERATIONS
]
