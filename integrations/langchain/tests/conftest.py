"""A real rltap proxy (uvicorn on 127.0.0.1) in front of the scripted engine and the tiny model.

The engine runs `rltap.testing.scripts.tool_loop`: a real tool call on the first turn when tools
are offered, then `Final answer: <tool result>`; without tools it echoes the user's message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import torch

from rltap.adapter import AgentAdapter
from rltap.testing import RunningProxy
from rltap.testing.harness import ProxyFactory, scripted_proxies

# Two shared cores: one torch thread is faster than two, and leaves a core to the others.
torch.set_num_threads(1)

# Variables through which an agent could reach a real vendor or upload traces.
_VENDOR_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "LANGSMITH_API_KEY",
    "LANGSMITH_TRACING",
    "LANGCHAIN_API_KEY",
    "LANGCHAIN_TRACING_V2",
)


@pytest.fixture(autouse=True)
def _no_vendor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _VENDOR_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def make_proxy() -> AsyncIterator[ProxyFactory]:
    """Start proxies running `tool_loop` with given engine options; all stop at teardown.

    `rltap.testing.harness` loads the tiny model and its renderer once per process, for these
    proxies and the standard suite's alike.
    """
    async with scripted_proxies(capacity=16) as start:
        yield start


@pytest.fixture
async def proxy(make_proxy: ProxyFactory) -> RunningProxy:
    """A proxy running the tool-loop script."""
    running: RunningProxy = await make_proxy()
    return running


@dataclass
class Episode:
    """What one adapter run left: its return value and the session's export body."""

    result: Any
    export: dict[str, Any]

    @property
    def interactions(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.export["interactions"]
        return items


EpisodeRunner = Callable[..., Awaitable[Episode]]


@pytest.fixture
def run_episode(proxy: RunningProxy) -> EpisodeRunner:
    """Run an adapter inline in a fresh session, end it, and export it (individual style)."""

    async def run(
        adapter: AgentAdapter,
        data: Any,
        http_client: httpx.AsyncClient | None = None,
        **kwargs: Any,
    ) -> Episode:
        session_id, key = await proxy.start_session()
        result = await adapter.run(
            data,
            base_url=proxy.base_url,
            api_key=key,
            http_client=http_client or proxy.http,
            **kwargs,
        )
        ended = await proxy.session_post(key, "/rl/end_session")
        assert ended.status_code == 200, ended.text
        return Episode(result, await proxy.export(session_id))

    return run
