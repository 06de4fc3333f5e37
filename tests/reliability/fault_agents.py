"""Agents that fail on purpose, for OpenAIProxyWorkflow (inline and in a subprocess pool).

The workflow loads this file by path (`fault_agents.py:FaultyAgent`), as `rltap rollout` does, so
subprocess workers ("spawn") can load it again and unpickle the agent.

A row says what the agent does: `turns` chat calls, then by `fail`:
    None            return `reward`
    "raise"         raise AgentBroke
    "die-mid-call"  open a streamed call the engine answers slowly, read one chunk, then os._exit(1)
    "wait"          wait until the test sets `resume` (inline only), then make one more call
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import openai

TRICKLE = "[trickle]"  # as in reliability_support: the engine streams this reply slowly


class AgentBroke(RuntimeError):
    pass


class FaultyAgent:
    def __init__(self) -> None:
        self.resume: asyncio.Event | None = None  # inline "wait" agents only

    async def run(
        self,
        data: dict[str, Any],
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> float:
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, http_client=http_client, max_retries=0
        )
        messages: list[Any] = []
        for turn in range(int(data.get("turns", 1))):
            messages.append({"role": "user", "content": f"{data.get('name', 'q')} turn {turn}"})
            reply = await client.chat.completions.create(model="instant", messages=messages)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        fail = data.get("fail")
        if fail == "raise":
            msg = f"agent broke after {data.get('turns')} turns"
            raise AgentBroke(msg)
        if fail == "die-mid-call":
            messages.append({"role": "user", "content": f"{TRICKLE} tell me everything"})
            stream = await client.chat.completions.create(
                model="instant", messages=messages, stream=True
            )
            async for _ in stream:
                os._exit(1)  # the worker dies with the engine still generating
        if fail == "wait":
            assert self.resume is not None
            await self.resume.wait()
            messages.append({"role": "user", "content": "and now?"})
            await client.chat.completions.create(model="instant", messages=messages)
        return float(data.get("reward", 1.0))
