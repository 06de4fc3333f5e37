"""The generation routes: one POST route per path of every registered wire API.

Each API's routes come from its spec (`rltap.protocols.SPECS`): the paths, the pydantic body
model, the conversion to a canonical request. The exchange (`rltap.session.exchange`) generates the
reply; a JSON body comes back as one response, a stream as server-sent events, which stop (and
abort the engine request) when the client disconnects.

They carry almost every call an agent makes, so they are plain Starlette routes of the app
(`ENDPOINTS`): the same middleware (body limit, metrics), the same key check and JSON parsing as
every route (`rltap.proxy.routing`), the same error handlers, and the body validated by the
spec's pydantic model; only FastAPI's per-request handler is left out, which costs as much as
the rest of the proxy (measured by bench/proxy_overhead.py: 0.35 ms more per call on the
project's 2-core machines). FastAPI documents them all the same (`DOCUMENTED`): routes declared
with the same models for the OpenAPI document, never served.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel

from rltap.protocols import SPECS, ApiSpec
from rltap.proxy.metrics import ProxyMetrics
from rltap.proxy.middleware import STARTED
from rltap.proxy.operations import documented_endpoint
from rltap.proxy.requests import request_agent
from rltap.proxy.routing import json_response, proxy_state, session_of
from rltap.proxy.state import SessionRecord
from rltap.record.generation import Generation
from rltap.session import exchange
from rltap.session.json_body import parse_json

__all__ = ["DOCUMENTED", "ENDPOINTS"]

_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
_REPLIES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": 'The reply: one JSON body, or server-sent events with "stream": true',
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "string"}},
        },
    },
    "default": {
        "description": "An error, in the API's own error envelope",
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
}


async def generate(
    spec: ApiSpec, request: Request, body: BaseModel, record: SessionRecord
) -> Response:
    """Answer one generation request of `spec`'s API in the session of `record`."""
    state = proxy_state(request)
    started: float = request.scope.get(STARTED, time.perf_counter())
    canonical, after = spec.canonical_in(body, record.session)
    canonical.agent = request_agent(request)
    loop = asyncio.get_running_loop()
    record.call_started()

    def done(generations: list[Generation]) -> None:
        record.call_finished()
        if after is not None:
            after(generations)
        state.store.touch(record)
        if generations:  # counted once the reply is on its way: the client need not wait
            loop.call_soon(_observe, state.metrics, spec.name, started, generations)

    result = await exchange.reply(record.session, canonical, done)
    if isinstance(result, exchange.JsonReply):
        return json_response(result.body)
    return StreamingResponse(result.chunks, media_type="text/event-stream", headers=_SSE_HEADERS)


def _observe(
    metrics: ProxyMetrics, api: str, started: float, generations: list[Generation]
) -> None:
    metrics.observe_generation(
        api,
        time.perf_counter() - started,
        max((g.response.latency for g in generations), default=0.0),
        sum(g.prompt_tokens for g in generations),
        sum(g.completion_tokens for g in generations),
    )


def _endpoint(spec: ApiSpec) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        record = session_of(request)  # the key before the body
        body = spec.validate(parse_json(await request.body()))
        return await generate(spec, request, body, record)

    return endpoint


# (path, endpoint) of every route served, for `app.add_route(path, endpoint, methods=["POST"])`.
ENDPOINTS = [(path, _endpoint(spec)) for spec in SPECS.values() for path in spec.paths]
DOCUMENTED = [
    APIRoute(
        path,
        documented_endpoint(body=spec.request_model),
        methods=["POST"],
        summary=spec.title,
        operation_id=f"{spec.name}{path.replace('/', '_')}",
        responses=_REPLIES,
        response_class=Response,
    )
    for spec in SPECS.values()
    for path in spec.paths
]
