"""The agent of bench/ray_scaling.py, loaded by path in each rollout actor: two turns of one
conversation through the actor's proxy with the plain `openai` SDK, reward 1."""

from __future__ import annotations

from typing import Any

import openai


class Agent:
    async def run(self, data: Any, **proxy: Any) -> float:
        client = openai.AsyncOpenAI(
            base_url=proxy["base_url"], api_key=proxy["api_key"], http_client=proxy["http_client"]
        )
        messages: list[Any] = []
        for turn in range(2):
            messages.append({"role": "user", "content": f"{data['question']} (turn {turn})"})
            reply = await client.chat.completions.create(model="bench", messages=messages)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        return 1.0
