"""An aiohttp app served in this process on a free 127.0.0.1 port: what the HTTP fakes share."""

from __future__ import annotations

import socket

from aiohttp import web

__all__ = ["serve_on_free_port"]


async def serve_on_free_port(app: web.Application) -> tuple[web.AppRunner, str]:
    """Start `app` on a port the system picks; its runner (to `cleanup()`) and its root URL."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}"
