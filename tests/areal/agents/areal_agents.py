"""Agents written the way AReaL 1.0.4's docs write them, for `rltap.areal.OpenAIProxyWorkflow`.

Named by file path (`AGENTS_FILE:Name`), as `rltap rollout` names agents: subprocess workers
("spawn") load this file again by the same module name, so the pickled agent resolves there.
"""

from __future__ import annotations

import os
from typing import Any

from openai import AsyncOpenAI, OpenAI


class TwoTurnAgent:
    """Proxy mode: the client from what the workflow passes, else from the environment."""

    async def run(self, data: dict[str, Any], **extra_kwargs: Any) -> float:
        client = AsyncOpenAI(
            base_url=extra_kwargs.get("base_url") or os.getenv("OPENAI_BASE_URL"),
            api_key=extra_kwargs.get("api_key") or os.getenv("OPENAI_API_KEY"),
            http_client=extra_kwargs.get("http_client"),
            max_retries=0,
        )
        messages = list(data["messages"])
        completion = await client.chat.completions.create(model="default", messages=messages)
        messages += [
            {"role": "assistant", "content": completion.choices[0].message.content},
            {"role": "user", "content": "and again?"},
        ]
        completion = await client.chat.completions.create(model="default", messages=messages)
        return 1.0 if "and again?" in (completion.choices[0].message.content or "") else 0.0


class SyncClientAgent:
    """Subprocess mode: an async run on the sync `OpenAI()` client built from the environment;
    two separate questions (two conversations of one episode)."""

    async def run(self, data: dict[str, Any], **extra_kwargs: Any) -> float:
        client = OpenAI(max_retries=0)
        for question in data["questions"]:
            client.chat.completions.create(
                model="default", messages=[{"role": "user", "content": question}]
            )
        return 1.0


class SyncRunAgent:
    """A `run` that is not async: AReaL's workflow refuses it in every mode."""

    def run(self, data: dict[str, Any], **extra_kwargs: Any) -> float:
        return 1.0
