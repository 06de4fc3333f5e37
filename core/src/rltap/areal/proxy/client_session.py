"""AReaL's `OpenAIProxyClient(session, base_url, task_id, admin_api_key)`: one session on a
running rltap proxy, over the caller's `aiohttp.ClientSession`.

Usage (as in AReaL):
    async with aiohttp.ClientSession() as http:
        client = OpenAIProxyClient(http, "http://127.0.0.1:8000", "task-1", admin_key)
        async with client:
            await agent.run(data, base_url=client.base_url, api_key=client.session_api_key)
            await client.set_last_reward(1.0)
        interactions = await client.export_interactions(discount=0.9)

It is `rltap.OpenAIProxyClient` with AReaL's constructor and defaults: entering starts a session
(without granting capacity, which AReaL's workflow does first), `base_url` is the proxy's
address ending in "/", and `export_interactions` discounts in insertion order (AReaL's numbers)
and hands out `rltap.areal.InteractionWithTokenLogpReward`s.
Errors are rltap's (`rltap.record.errors`; a 400 is also a ValueError), not aiohttp's.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from rltap.areal.types import InteractionWithTokenLogpReward, as_areal
from rltap.client import OpenAIProxyClient as RltapProxyClient
from rltap.client import Reply

__all__ = ["OpenAIProxyClient"]


class OpenAIProxyClient(RltapProxyClient):
    """AReaL 1.0.4's proxy client (see the module)."""

    def __init__(
        self, session: aiohttp.ClientSession, base_url: str, task_id: str, admin_api_key: str
    ) -> None:
        super().__init__(base_url, admin_api_key, task_id=task_id)
        self._session = session

    async def _send(self, url: str, body: dict[str, Any] | None, headers: dict[str, str]) -> Reply:
        async with self._session.post(url, json=body, headers=headers) as response:
            return Reply(
                response.status, response.headers.get("retry-after"), await response.read()
            )

    @property
    def base_url(self) -> str:
        return f"{self.proxy_url}/"

    @property
    def session_api_key(self) -> str:
        if self.api_key is None:
            msg = "Session API key is not set"
            raise ValueError(msg)
        return self.api_key

    async def start_session(self) -> str:
        body = {"task_id": self.task_id}
        result = await self._post("/rl/start_session", body, admin=True, retry=True)
        self.session_id, self.api_key = result["session_id"], result["api_key"]
        return str(self.session_id)

    async def set_reward(self, completion_id: str, reward: float) -> None:
        self._require_session()
        await super().set_reward(completion_id, reward)

    async def set_last_reward(self, reward: float) -> str:
        self._require_session()
        return await super().set_last_reward(reward)

    async def export_interactions(  # type: ignore[override]
        self, discount: float = 1.0, style: str = "individual"
    ) -> dict[str, InteractionWithTokenLogpReward]:
        if self.session_id is None:
            msg = "session_id must be set before exporting interactions"
            raise ValueError(msg)
        exported = await super().export_interactions(
            discount=discount, style=style, discount_mode="chain"
        )
        return {interaction_id: as_areal(node) for interaction_id, node in exported.items()}

    def _require_session(self) -> None:
        if self.session_id is None:
            msg = "Session ID is not set"
            raise ValueError(msg)
