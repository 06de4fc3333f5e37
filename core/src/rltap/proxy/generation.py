"""The generation routes: one POST route per path of every registered wire API.

Each API's routes come from its spec (`rltap.protocols.SPECS`): the paths, the pydantic body
model FastAPI validates and documents, the conversion to a canonical request. The exchange
(`rltap.exchange`) generates the reply; a JSON body comes back as one response, a stream as
server-sent events, which stop (and abort the engine request) when the client disconnects.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from rltap import exchange
from rltap.generation import Generation
from rltap.protocols import SPECS, ApiSpec
from rltap.proxy.metrics import ProxyMetrics
from rltap.proxy.routing import SessionRoute, caller_session, proxy_state
from rltap.proxy.state import SessionRecord

__all__ = ["STARTED", "router"]

# The ASGI scope key under which the metrics middleware keeps when a request arrived.
STARTED = "rltap.started"
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

router = APIRouter(route_class=SessionRoute)


async def generate(
    spec: ApiSpec, request: Request, body: BaseModel, record: SessionRecord
) -> Response:
    """Answer one generation request of `spec`'s API in the session of `record`."""
    state = proxy_state(request)
    started: float = request.scope.get(STARTED, time.perf_counter())
    canonical = spec.to_canonical(body)
    loop = asyncio.get_running_loop()
    record.call_started()

    def done(generations: list[Generation]) -> None:
        record.call_finished()
        state.store.touch(record)
        if generations:  # counted once the reply is on its way: the client need not wait
            loop.call_soon(_observe, state.metrics, spec.name, started, generations)

    result = await exchange.reply(record.session, canonical, done)
    if isinstance(result, exchange.JsonReply):
        return Response(orjson.dumps(result.body), media_type="application/json")
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


def _endpoint(spec: ApiSpec) -> Callable[..., Awaitable[Response]]:
    """`generate` for one API, with that API's body model in its signature (FastAPI validates
    and documents the body by the annotation)."""

    async def endpoint(request: Request, body: BaseModel) -> Response:
        return await generate(spec, request, body, caller_session(request))

    signature = inspect.signature(endpoint)
    parameters = [
        p.replace(annotation=spec.request_model) if p.name == "body" else p
        for p in signature.parameters.values()
    ]
    endpoint.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return endpoint


for _spec in SPECS.values():
    for _path in _spec.paths:
        router.add_api_route(
            _path,
            _endpoint(_spec),
            methods=["POST"],
            summary=_spec.title,
            operation_id=f"{_spec.name}{_path.replace('/', '_')}",
            responses=_REPLIES,
            response_class=Response,
        )
