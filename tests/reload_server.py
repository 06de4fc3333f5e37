"""A fake weight-reload server: real HTTP on 127.0.0.1 answering fixed replies per route, for the
vLLM development API and SGLang's `/update_weights_from_disk` (neither server runs here).

Each request is recorded as (method, path, query, JSON body), and with `folder` set the file
names in it at that moment, so a test sees whether the weights were saved before the server was
asked to load them. A route it does not know answers 404, as a vLLM server without
`VLLM_SERVER_DEV_MODE=1` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

__all__ = ["VLLM_DEV_ROUTES", "ReloadServer"]

VLLM_DEV_ROUTES: dict[str, tuple[int, Any]] = {
    "/is_paused": (200, {"is_paused": False}),
    "/pause": (200, {"status": "paused"}),
    "/collective_rpc": (200, {"results": [None]}),
    "/reset_prefix_cache": (200, {"success": True}),
    "/update_weight_version": (200, {"success": True, "new_version": "5"}),
    "/resume": (200, {"status": "resumed"}),
}


class ReloadServer:
    """Answers each route of `routes` with its (status, JSON reply); `url` once entered."""

    def __init__(self, routes: dict[str, tuple[int, Any]]) -> None:
        self.routes = routes
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.files_seen: list[set[str]] = []  # the weight folder's files at each request
        self.folder: Path | None = None
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.requests.append((request.method, request.path, dict(request.query), body))
        if self.folder is not None:
            self.files_seen.append({p.name for p in self.folder.glob("*")})
        if request.path not in self.routes:
            return web.json_response({"detail": "Not Found"}, status=404)
        status, reply = self.routes[request.path]
        return web.json_response(reply, status=status)

    def paths(self) -> list[str]:
        return [path for _, path, _, _ in self.requests]

    async def __aenter__(self) -> ReloadServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()
