"""An aiohttp app served in this process on a free 127.0.0.1 port: what the HTTP fakes share."""

from __future__ import annotations

import abc
import socket
from typing import Self

from aiohttp import web

__all__ = ["ServedApp", "serve_on_free_port"]


async def serve_on_free_port(app: web.Application, port: int = 0) -> tuple[web.AppRunner, str]:
    """Start `app` on a port the system picks (or on `port`, as a server started again on its
    address); its runner (to `cleanup()`) and its root URL."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}"


class ServedApp(abc.ABC):
    """An HTTP fake's life: `start()` serves its `app()` on a free port and sets `url` (its
    root), `stop()` ends it; or `async with Fake() as server: server.url`."""

    url: str = ""
    _runner: web.AppRunner | None = None

    @abc.abstractmethod
    def app(self) -> web.Application:
        """The aiohttp app this fake serves."""

    async def start(self) -> str:
        self._runner, self.url = await serve_on_free_port(self.app())
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
