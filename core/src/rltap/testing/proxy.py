"""A real proxy for tests: uvicorn on 127.0.0.1 in front of an engine, and helpers to drive it.

Usage (in an async test):
    async with start_test_proxy(engine, renderer) as proxy:
        session_id, key = await proxy.start_session()
        client = AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ServeConfig
from rltap.engines.base import InferenceEngine
from rltap.proxy import ProxyServer, ProxyState, create_app

__all__ = ["TEST_ADMIN_KEY", "RunningProxy", "start_test_proxy"]

TEST_ADMIN_KEY = "admin-key-for-tests-0123456789"


@dataclass
class RunningProxy:
    """A running proxy: its address, admin key, internal state and an HTTP client for it."""

    url: str
    admin_key: str
    state: ProxyState
    http: httpx.AsyncClient

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    async def admin(self, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.admin_key}"}
        return await self.http.post(f"{self.url}{path}", json=body, headers=headers)

    async def start_session(self, **body: Any) -> tuple[str, str]:
        response = await self.admin("/rl/start_session", body)
        assert response.status_code == 200, response.text
        data = response.json()
        return data["session_id"], data["api_key"]

    async def session_post(
        self, key: str, path: str, body: dict[str, Any] | None = None
    ) -> httpx.Response:
        return await self.http.post(
            f"{self.url}{path}", json=body, headers={"authorization": f"Bearer {key}"}
        )

    async def export(self, session_id: str, **body: Any) -> dict[str, Any]:
        response = await self.admin("/export_trajectories", {"session_id": session_id, **body})
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result


@contextlib.asynccontextmanager
async def start_test_proxy(
    engine: InferenceEngine,
    renderer: ChatRenderer,
    config: ServeConfig | None = None,
    *,
    admin_key: str = TEST_ADMIN_KEY,
) -> AsyncIterator[RunningProxy]:
    """Serve `engine` on a free 127.0.0.1 port for the duration of the block, on `rltap serve`'s
    settings `config` (its defaults when None)."""
    app = create_app(engine, renderer, config, admin_key=admin_key)
    async with ProxyServer(app) as server, httpx.AsyncClient(timeout=120) as http:
        yield RunningProxy(server.url, admin_key, app.state.rltap, http)
