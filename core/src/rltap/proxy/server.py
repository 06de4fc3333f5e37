"""Running the proxy: `rltap serve`, and an in-process server for tests and `rltap rollout`."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import FastAPI

from rltap.chat.renderer import ChatRenderer
from rltap.chat.streaming import build_output_parser
from rltap.config.serve import FALLBACK_MAX_CONTEXT, ServeConfig, ServerConfig, StoreConfig
from rltap.engines.base import InferenceEngine
from rltap.engines.factory import create_engine
from rltap.proxy.app import create_app
from rltap.proxy.state import ProxyConfig, ProxyLimits
from rltap.session.session import SessionConfig
from rltap.store.capture import StoreInUse
from rltap.store.retention import parse_retention

if TYPE_CHECKING:
    from rltap.store.retention import Retention

__all__ = [
    "UVICORN_OPTIONS",
    "ProxyServer",
    "ServeSetup",
    "check_admin_key",
    "run_serve",
    "serve_config",
]

# Keys anyone would guess; refused when the proxy listens beyond loopback.
_WEAK_KEYS = frozenset({"admin", "test", "secret", "password", "changeme", "rltap", "areal", "key"})
_MIN_PUBLIC_KEY_LEN = 16
# How uvicorn runs the proxy, in `rltap serve` and in tests alike. rltap does not trust
# X-Forwarded-* headers (nothing it does depends on the client's address), so uvicorn's
# proxy-headers middleware, on by default, would be one more layer on every request for nothing.
# Nor does it send `server: uvicorn`: uvicorn checks every response header against two regular
# expressions, and that one says nothing a client needs.
# An idle connection stays open longer than any client keeps one for reuse (httpx and the OpenAI
# SDK: 5 s, aiohttp: 15 s). At uvicorn's default of 5 s, a client reusing a connection idle for
# about 5 s (a workflow's client between two training steps) raced the server closing it and got
# a ReadError on a request the proxy never saw.
_KEEP_ALIVE_SECONDS = 75
UVICORN_OPTIONS: dict[str, Any] = {
    "timeout_keep_alive": _KEEP_ALIVE_SECONDS,
    "log_level": "warning",
    "access_log": False,
    "proxy_headers": False,
    "server_header": False,
    # uvicorn[standard]'s event loop and HTTP parser (what "auto" picks where they are installed),
    # stated: against asyncio + h11 they take 0.19-0.29 ms off a proxied call's added median
    # (bench/proxy_overhead.py with a baseline of this tree on asyncio and h11, 2026-12-02).
    "loop": "uvloop",
    "http": "httptools",
}


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_admin_key(admin_key: str, host: str) -> None:
    """Refuse an empty or guessable admin key on a non-loopback address."""
    if _is_loopback(host):
        return
    if not admin_key or admin_key.lower() in _WEAK_KEYS or len(admin_key) < _MIN_PUBLIC_KEY_LEN:
        msg = (
            f"refusing to listen on {host} with a known or short admin key; use at least "
            f"{_MIN_PUBLIC_KEY_LEN} random characters (--admin-key or RLTAP_ADMIN_KEY)"
        )
        raise SystemExit(msg)


class ProxyServer:
    """A uvicorn server for `app` on this event loop, on a free port unless one is given.

    Usage:
        async with ProxyServer(app) as server:
            client = AsyncOpenAI(base_url=server.url + "/v1", api_key=key)
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        config = uvicorn.Config(app, host=host, port=port, lifespan="on", **UVICORN_OPTIONS)
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def __aenter__(self) -> ProxyServer:
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it stopped
                msg = "the proxy server stopped while starting"
                raise RuntimeError(msg)
            await asyncio.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task


def _max_context(config: ServeConfig, engine: InferenceEngine) -> int:
    if config.chat.max_context:
        return int(config.chat.max_context)
    limit = getattr(engine, "max_context", None)
    if isinstance(limit, int) and limit > 0:
        return limit
    model_config = Path(config.engine.model or "") / "config.json"
    if model_config.is_file():
        import json

        value = json.loads(model_config.read_text()).get("max_position_embeddings")
        if isinstance(value, int):
            return value
    return FALLBACK_MAX_CONTEXT


@dataclass(slots=True)
class ServeSetup:
    engine: InferenceEngine
    renderer: ChatRenderer
    config: ProxyConfig


def serve_config(
    config: ServeConfig,
    admin_key: str,
    *,
    engine: InferenceEngine | None = None,
    tokenizer: Any = None,
) -> ServeSetup:
    """Engine, renderer and proxy config from `rltap serve`'s settings; `engine`, when given,
    serves instead of the one the settings name (`rltap train`'s on the trainer's model), and
    the renderer renders with `tokenizer`, when given (the settings' tokenizer, already loaded)."""
    store, retention = _store_settings(config.store)  # before the engine loads: fail fast
    engine_config, chat, limits = config.engine, config.chat, config.limits
    tokenizer_dir = engine_config.tokenizer or engine_config.model
    if not tokenizer_dir:
        msg = "--tokenizer (or --model) must name a local tokenizer folder"
        raise SystemExit(msg)
    engine = engine or create_engine(
        engine_config.engine,
        model=engine_config.model,
        tokenizer=tokenizer_dir,
        url=engine_config.url,
        script=engine_config.script,
        num_threads=engine_config.num_threads,
        device=engine_config.device,
        max_prefill_tokens=engine_config.max_prefill_tokens,
    )
    renderer = ChatRenderer.from_pretrained(
        tokenizer_dir, mode=chat.chat_template_mode, tokenizer=tokenizer
    )
    session = SessionConfig(
        max_context=_max_context(config, engine),
        default_max_tokens=chat.default_max_tokens,
        default_temperature=chat.default_temperature,
        output_parser=build_output_parser(chat.tool_parser, chat.reasoning_parser),
        strict_max_tokens=chat.strict_max_tokens,
        drop_unsupported_content=chat.drop_unsupported_content,
    )
    proxy_limits = ProxyLimits(
        capacity=limits.capacity, session_ttl=limits.session_ttl, export_grace=limits.export_grace
    )
    name = limits.model_name or Path(str(engine_config.model or tokenizer_dir)).name
    proxy_config = ProxyConfig(
        admin_key=admin_key,
        model_name=name,
        limits=proxy_limits,
        session=session,
        max_body_bytes=limits.max_body_bytes,
        export_format=limits.export_format,
        store_path=store,
        store_retention=retention,
    )
    return ServeSetup(engine=engine, renderer=renderer, config=proxy_config)


def _store_settings(config: StoreConfig) -> tuple[Path | None, Retention | None]:
    """`--store` and `--store-retention`."""
    store, text = config.store, config.store_retention
    if text is None:
        return (None if store is None else Path(store)), None
    if store is None:
        raise SystemExit("--store-retention needs --store")

    try:
        return Path(store), parse_retention(text)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def run_serve(config: ServerConfig) -> int:
    """`rltap serve`: the proxy in front of an engine, until interrupted."""
    admin_key = config.admin_key
    if admin_key is None:
        admin_key = os.environ.get("RLTAP_ADMIN_KEY")
    if admin_key is not None:
        check_admin_key(admin_key, config.host)  # an explicit "" is an empty key: refused
    generated = not admin_key
    if not admin_key:
        admin_key = secrets.token_urlsafe(24)
    setup = serve_config(config.serve, admin_key)

    try:
        app = create_app(setup.engine, setup.renderer, setup.config)
    except StoreInUse as exc:
        raise SystemExit(str(exc)) from None
    if generated:
        print(f"rltap admin key (generated): {admin_key}", flush=True)
    where = f"http://{config.host}:{config.port}"
    print(f"rltap proxy on {where} (engine {config.serve.engine.engine})", flush=True)
    capture = app.state.rltap.store.capture
    if capture is not None:
        print(
            f"capture store {capture.path}: {capture.interrupted} sessions still open at the "
            "last proxy's end are exportable as interrupted",
            flush=True,
        )
    uvicorn.run(app, host=config.host, port=config.port, **UVICORN_OPTIONS)
    return 0
