"""The proxy's HTTP surface: one FastAPI app, one pipeline for every route.

Every route, generation (`rltap.proxy.generation`, one per path of each wire API), the APIs'
other operations (`rltap.proxy.operations`) and control (`rltap.proxy.control`), passes the same
body limit and metrics middleware, reads its body the same way and checks its key with the same
dependencies (`rltap.proxy.routing`), and has its errors mapped in one place
(`rltap.proxy.errors`). The OpenAPI document is FastAPI's, generated from the routes' pydantic
models.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ServeConfig
from rltap.engines.base import InferenceEngine
from rltap.engines.router import EngineRouter
from rltap.proxy import control, generation, operations
from rltap.proxy.errors import install_error_handlers
from rltap.proxy.metrics import ProxyMetrics
from rltap.proxy.middleware import BodyLimitMiddleware, MetricsMiddleware
from rltap.proxy.state import ProxyState, SessionStore
from rltap.record.errors import RltapError
from rltap.session.engine_request import output_parser
from rltap.session.session import Session
from rltap.store.capture import CaptureStore
from rltap.tree.cache import InteractionCache

if TYPE_CHECKING:
    from rltap.store.capture import CaptureStore

__all__ = ["create_app"]


def create_app(
    engine: InferenceEngine,
    renderer: ChatRenderer,
    config: ServeConfig | None = None,
    *,
    admin_key: str,
) -> FastAPI:
    """The proxy as an ASGI app on `rltap serve`'s settings (`config`; its engine section names
    the model, `engine` and `renderer` are already built from it); the engine starts and stops
    with it. Every session takes the chat section, with --max-context filled in from the
    model's config.json when unset. Over several engines (an `EngineRouter`), `/metrics`
    shows each engine's load and a session that ends leaves the router's map.

    Usage:
        app = create_app(engine, renderer, ServeConfig(limits=LimitsConfig(capacity=64)),
                         admin_key=key)
    """
    config = _with_context(config or ServeConfig())
    output_parser(config.chat)  # an unknown parser name fails here, not at the first session
    capture = _capture_store(config, renderer)

    state = _proxy_state(engine, renderer, config, admin_key, capture)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await engine.start()
        except BaseException as exc:
            if isinstance(exc, RltapError):
                state.startup_error = exc
            await _close(engine, capture)  # the proxy will not serve: its writer must end too
            raise
        reaper = asyncio.create_task(state.store.run_reaper())
        try:
            yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await _close(engine, capture)

    app = FastAPI(title="rltap proxy", version="0.1.0", lifespan=lifespan)
    app.state.rltap = state
    _mount_routes(app, state)
    return app


async def _close(engine: InferenceEngine, capture: CaptureStore | None) -> None:
    try:
        await engine.close()
    finally:
        if capture is not None:
            capture.close()


def _proxy_state(
    engine: InferenceEngine,
    renderer: ChatRenderer,
    config: ServeConfig,
    admin_key: str,
    capture: CaptureStore | None,
) -> ProxyState:
    """What the routes share; over an `EngineRouter`, with its per-engine metrics and told
    each session that ends."""

    def new_session(session_id: str) -> Session:
        cache = InteractionCache(None if capture is None else capture.journal(session_id))
        return Session(
            engine, renderer, config.chat, session_id=session_id, cache=cache,
            policies=config.policies,
        )  # fmt: skip

    router = engine if isinstance(engine, EngineRouter) else None
    on_end = None if router is None else router.end_session
    store = SessionStore(admin_key, new_session, config.limits, capture=capture, on_end=on_end)
    metrics = ProxyMetrics()
    if router is not None:
        metrics.watch_engines(router.loads)
    return ProxyState(config=config, engine=engine, renderer=renderer, store=store, metrics=metrics)


def _mount_routes(app: FastAPI, state: ProxyState) -> None:
    """Every route, behind the body limit and the metrics, with the errors mapped in one place
    and one OpenAPI document for all."""
    for path, endpoint in generation.ENDPOINTS:
        app.add_route(path, endpoint, methods=["POST"], include_in_schema=False)
    for path, endpoint, method in operations.ENDPOINTS:
        app.add_route(path, endpoint, methods=[method], include_in_schema=False)
    for router in control.ROUTERS:
        app.include_router(router)
    documented = [
        *generation.DOCUMENTED,
        *operations.DOCUMENTED,
        *(route for router in control.ROUTERS for route in router.routes),
    ]
    routes = [route.path for route in documented if isinstance(route, APIRoute)]
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=state.config.limits.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics, routes=routes)
    install_error_handlers(app)

    def openapi() -> dict[str, Any]:
        # FastAPI's document, with the generation routes declared where it can see them.
        if app.openapi_schema is None:
            app.openapi_schema = get_openapi(
                title=app.title, version=app.version, routes=documented
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _with_context(config: ServeConfig) -> ServeConfig:
    """`config` with the chat section's --max-context set: the model's `max_position_embeddings`
    when the flag leaves it unset and the model folder says one."""
    if config.chat.max_context or not config.engine.model:
        return config
    model_config = Path(config.engine.model) / "config.json"
    if not model_config.is_file():
        return config
    value = json.loads(model_config.read_text()).get("max_position_embeddings")
    if not isinstance(value, int) or value < 1:
        return config
    chat = dataclasses.replace(config.chat, max_context=value)
    return dataclasses.replace(config, chat=chat)


def _capture_store(config: ServeConfig, renderer: ChatRenderer) -> CaptureStore | None:
    """The durable store of `config` (`rltap serve --store`), opened and recovered; or None."""
    path = config.store.path
    if path is None:
        return None

    capture = CaptureStore(path, config.store.retention)
    # The viewer decodes the recorded tokens with the tokenizer that made them.
    capture.set_meta("tokenizer", str(getattr(renderer.tokenizer, "name_or_path", "")))
    return capture
