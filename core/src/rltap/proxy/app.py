"""The proxy's HTTP surface: the generation endpoint in front of thin FastAPI routes.

The generation routes (/v1/chat/completions, /v1/responses, /v1/messages and their aliases) are
served by `rltap.proxy.generation` straight from ASGI, before FastAPI's middleware: they carry
almost every call. The RL control routes, health, models and metrics are FastAPI routes
(`rltap.proxy.rl_routes`). Both parse bodies themselves (orjson); the wire models live in
`rltap.protocols`, the work in `rltap.session`, and `rltap.exchange` joins them (the direct client
uses the same exchange in process). Every `RltapError` becomes the API's own error body
(Anthropic's on /v1/messages, OpenAI's elsewhere) with its status code, in `rltap.proxy.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from rltap.chat.renderer import ChatRenderer
from rltap.engines.base import InferenceEngine
from rltap.proxy import rl_routes
from rltap.proxy.errors import install_error_handlers
from rltap.proxy.generation import (
    GENERATION_ROUTES,
    GenerationEndpoint,
    document_generation_routes,
)
from rltap.proxy.metrics import ProxyMetrics
from rltap.proxy.middleware import BodyLimitMiddleware, MetricsMiddleware
from rltap.proxy.state import ProxyLimits, SessionStore
from rltap.session import Session, SessionConfig

__all__ = ["ProxyApp", "ProxyConfig", "ProxyState", "create_app"]


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


class ProxyApp(FastAPI):
    """The FastAPI app, with the generation routes answered before its middleware stack.

    Its OpenAPI document lists the generation routes too, with their request-body schemas.
    """

    def __init__(self, generation: GenerationEndpoint, **fastapi_options: Any) -> None:
        super().__init__(**fastapi_options)
        self.generation = generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in GENERATION_ROUTES:
            await self.generation(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is not None:
            return self.openapi_schema
        document = super().openapi()  # FastAPI keeps it as self.openapi_schema
        document_generation_routes(document)
        return document


def create_app(engine: InferenceEngine, renderer: ChatRenderer, config: ProxyConfig) -> ProxyApp:
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

    app = ProxyApp(
        GenerationEndpoint(state), title="rltap proxy", version="0.1.0", lifespan=lifespan
    )
    app.state.rltap = state
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=config.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    install_error_handlers(app)
    rl_routes.add_routes(app, state)
    return app
