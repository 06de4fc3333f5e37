"""The proxy's HTTP surface: thin FastAPI routes over the session store and the protocol modules.

Routes parse bodies themselves (orjson) and answer with `Response`/`StreamingResponse`: the wire
models live in `rltap.protocols`, the work in `rltap.session`, and `rltap.exchange` joins them
(the direct client uses the same exchange in process). Every `RltapError` becomes the API's
own error body (Anthropic's on /v1/messages, OpenAI's elsewhere) with its status code, in
`rltap.proxy.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse

from rltap import exchange
from rltap.chat.renderer import ChatRenderer
from rltap.engines.base import InferenceEngine
from rltap.protocols.base import Api, Generation
from rltap.proxy import rl_routes
from rltap.proxy.errors import install_error_handlers
from rltap.proxy.metrics import ProxyMetrics
from rltap.proxy.middleware import BodyLimitMiddleware, MetricsMiddleware
from rltap.proxy.requests import read_json, request_key
from rltap.proxy.state import ProxyLimits, SessionStore
from rltap.session import Session, SessionConfig

__all__ = ["ProxyConfig", "ProxyState", "create_app"]


@dataclass(slots=True, kw_only=True)
class ProxyConfig:
    """Everything the app needs besides the engine and the renderer.

    Usage:
        ProxyConfig(admin_key="...", model_name="qwen-tiny", limits=ProxyLimits(capacity=64))
    """

    admin_key: str
    model_name: str = "rltap"
    limits: ProxyLimits = field(default_factory=ProxyLimits)
    session: SessionConfig = field(default_factory=SessionConfig)
    max_body_bytes: int = 32 * 1024 * 1024
    export_wait_timeout: float = 30.0
    max_export_wait: float = 600.0


@dataclass(slots=True, kw_only=True)
class ProxyState:
    """What the routes share: config, engine, renderer, sessions and metrics."""

    config: ProxyConfig
    engine: InferenceEngine
    renderer: ChatRenderer
    store: SessionStore
    metrics: ProxyMetrics


def create_app(engine: InferenceEngine, renderer: ChatRenderer, config: ProxyConfig) -> FastAPI:
    """The proxy as an ASGI app; the engine starts and stops with it."""

    def new_session(session_id: str) -> Session:
        return Session(engine, renderer, config.session, session_id=session_id)

    state = ProxyState(
        config=config,
        engine=engine,
        renderer=renderer,
        store=SessionStore(config.admin_key, new_session, config.limits),
        metrics=ProxyMetrics(),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await engine.start()
        reaper = asyncio.create_task(state.store.run_reaper())
        try:
            yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await engine.close()

    app = FastAPI(title="rltap proxy", version="0.1.0", lifespan=lifespan)
    app.state.rltap = state
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=config.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    install_error_handlers(app)
    _add_generation_routes(app, state)
    rl_routes.add_routes(app, state)
    return app


def _add_generation_routes(app: FastAPI, state: ProxyState) -> None:
    routes: tuple[tuple[Api, tuple[str, ...]], ...] = (
        ("chat", ("/v1/chat/completions", "/chat/completions")),
        ("responses", ("/v1/responses", "/responses")),
        ("messages", ("/v1/messages",)),
    )
    for api, paths in routes:
        handler = _generation_handler(state, api)
        for path in paths:
            app.add_api_route(path, handler, methods=["POST"], name=f"{api}:{path}")


def _generation_handler(state: ProxyState, api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        started = time.perf_counter()
        record = state.store.session_for_key(request_key(request))
        canonical = exchange.parse(api, await read_json(request))
        record.call_started()

        def done(generations: list[Generation]) -> None:
            record.call_finished()
            state.store.touch(record)
            if generations:
                _observe(state, api, started, generations)

        result = await exchange.reply(record.session, canonical, done)
        if isinstance(result, exchange.JsonReply):
            return Response(orjson.dumps(result.body), media_type="application/json")
        return StreamingResponse(
            result.chunks,
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    return handle


def _observe(state: ProxyState, api: str, started: float, generations: list[Generation]) -> None:
    state.metrics.observe_generation(
        api,
        time.perf_counter() - started,
        max((g.response.latency for g in generations), default=0.0),
        sum(g.prompt_tokens for g in generations),
        sum(g.completion_tokens for g in generations),
    )
