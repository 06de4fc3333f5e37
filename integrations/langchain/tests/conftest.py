"""A real rltap proxy (uvicorn on 127.0.0.1) in front of the scripted engine and the tiny model.

The engine runs `rltap.testing.scripts.tool_loop`: a real tool call on the first turn when tools
are offered, then `Final answer: <tool result>`; without tools it echoes the user's message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import torch

from rltap.adapter import AgentAdapter
from rltap.testing import RunningProxy

# `proxy`, `make_proxy`, and no vendor key, address or tracing switch in the environment.
pytest_plugins = ["rltap.testing.fixtures"]

# Two shared cores: one torch thread is faster than two, and leaves a core to the others.
torch.set_num_threads(1)


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
