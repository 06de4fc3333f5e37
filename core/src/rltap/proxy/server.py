"""Running the proxy: `rltap serve`, and an in-process server for tests and `rltap rollout`."""

from __future__ import annotations

import asyncio
import os
import secrets
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import uvicorn
from fastapi import FastAPI

from rltap.chat.renderer import ChatRenderer
from rltap.config.flags import ConfigError
from rltap.config.serve import ServeConfig, ServerConfig, check_admin_key
from rltap.engines.base import InferenceEngine
from rltap.engines.factory import create_engine
from rltap.engines.launch import check_port_free
from rltap.engines.managed import ManagedServers, log_folder
from rltap.proxy.app import create_app
from rltap.record.errors import ProxyStartFailed, RltapError, Terminated

__all__ = [
    "UVICORN_OPTIONS",
    "ProxyServer",
    "ServeSetup",
    "run_serve",
]

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


class ProxyServer:
    """A uvicorn server for `app` on this event loop, on a free port unless one is given.

    Usage:
        async with ProxyServer(app) as server:
            client = AsyncOpenAI(base_url=server.url + "/v1", api_key=key)
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        config = uvicorn.Config(app, host=host, port=port, lifespan="on", **UVICORN_OPTIONS)
        self._server = uvicorn.Server(config)
        self._app = app
        self._task: asyncio.Task[None] | None = None
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def __aenter__(self) -> ProxyServer:
        self._task = asyncio.create_task(self._serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it stopped
                raise not_started(self._app, self.url)
            await asyncio.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    async def _serve(self) -> None:
        try:
            await self._server.serve()
        except BaseException as exc:  # uvicorn exits (SystemExit) when it cannot start
            if self._server.started or isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
                raise
            raise not_started(self._app, self.url) from None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task


@dataclass(frozen=True, slots=True)
class ServeSetup:
    """The engine and renderer `rltap serve`'s settings name, loaded, with those settings.

    Usage:
        setup = ServeSetup.load(config)
        async with ProxyServer(setup.app(admin_key)) as server: ...
    """

    engine: InferenceEngine
    renderer: ChatRenderer
    config: ServeConfig

    @classmethod
    def load(
        cls, config: ServeConfig, *, engine: InferenceEngine | None = None, tokenizer: Any = None
    ) -> ServeSetup:
        """The engine `config` names (or `engine`, given: `rltap train`'s on the trainer's
        model) and a renderer of its tokenizer folder (rendering with `tokenizer` when given,
        the same folder already loaded); `ConfigError` when the settings name no folder."""
        if config.launch.launch:  # its servers are started by the caller (run_serve, local_proxy)
            msg = "--launch is taken by rltap serve, rollout, eval and train; give --url here"
            raise ConfigError(msg)
        folder = config.engine.tokenizer_dir  # before the engine loads: fail fast
        engine = engine or create_engine(
            config.engine.engine,
            model=config.engine.model,
            tokenizer=folder,
            url=config.engine.url,
            script=config.engine.script,
            num_threads=config.engine.num_threads,
            device=config.engine.device,
            max_prefill_tokens=config.engine.max_prefill_tokens,
        )
        mode = config.chat.chat_template_mode
        renderer = ChatRenderer.from_pretrained(folder, mode=mode, tokenizer=tokenizer)
        return cls(engine=engine, renderer=renderer, config=config)

    def app(self, admin_key: str) -> FastAPI:
        """The proxy's app on this engine, renderer and settings (`create_app`)."""
        return create_app(self.engine, self.renderer, self.config, admin_key=admin_key)


def run_serve(config: ServerConfig) -> int:
    """`rltap serve`: the proxy in front of an engine (with --launch, on the servers it starts
    and stops), until interrupted. A refused setting raises `ConfigError`, a store another
    proxy holds `StoreInUse`, a launched server that fails `EngineServerFailed`."""
    admin_key = config.admin_key  # ServerConfig checked an explicit one against --host
    if admin_key is None:
        admin_key = os.environ.get("RLTAP_ADMIN_KEY")
        if admin_key is not None:
            check_admin_key(admin_key, config.host)
    generated = not admin_key
    if not admin_key:
        admin_key = secrets.token_urlsafe(24)
    if not config.serve.launch.launch:
        return _serve(config, config.serve, admin_key, generated=generated)
    check_port_free(config.host, config.port, "--port")  # before the servers' minutes of start
    servers = ManagedServers.of(config.serve, log_dir=log_folder(config.serve, None))
    with servers.running():
        return _serve(
            config,
            servers.serve_config(config.serve),
            admin_key,
            generated=generated,
            servers=servers,
        )


def _serve(
    config: ServerConfig,
    serve: ServeConfig,
    admin_key: str,
    *,
    generated: bool,
    servers: ManagedServers | None = None,
) -> int:
    app = ServeSetup.load(serve).app(admin_key)
    if generated:
        print(f"rltap admin key (generated): {admin_key}", flush=True)
    where = f"http://{config.host}:{config.port}"
    print(f"rltap proxy on {where} (engine {serve.engine.engine})", flush=True)
    capture = app.state.rltap.store.capture
    if capture is not None:
        print(
            f"capture store {capture.path}: {capture.interrupted} sessions still open at the "
            "last proxy's end are exportable as interrupted",
            flush=True,
        )
    server = uvicorn.Server(
        uvicorn.Config(app, host=config.host, port=config.port, **UVICORN_OPTIONS)
    )
    if servers is not None:  # a launched server that dies ends `rltap serve`
        servers.watch(lambda _failure: setattr(server, "should_exit", True))
    try:
        try:
            server.run()
        except BaseException as exc:  # uvicorn ends the process when it cannot start
            if server.started or isinstance(exc, KeyboardInterrupt | Terminated):
                raise
            raise not_started(app, where) from None
    finally:
        # A launched server's death stopped the proxy, or failed the engine's start (then wait
        # a moment for its process to end): that is the error to report.
        failure = servers.dead(wait=0.0 if server.started else 2.0) if servers else None
        if failure is not None:
            raise failure
    if not server.started:
        raise not_started(app, where)
    return 0


def not_started(app: FastAPI, where: str) -> RltapError:
    """Why the proxy's uvicorn server stopped before serving: the engine's start failed (its
    error), else uvicorn's own reason, which it logged (a port taken, ...)."""
    startup_error: RltapError | None = app.state.rltap.startup_error
    if startup_error is not None:
        return startup_error
    msg = f"the proxy did not start on {where} (uvicorn's reason is above: a port taken?)"
    return ProxyStartFailed(msg)
