"""A toy episode of three agents for the policies' tests: a writer replies to the prompt, a
critic replies to the writer, a helper (which no policy names) answers last; the episode's
reward is the share of CJK characters in the writer's and critic's replies (the toy task of
examples/train_toy, which a random tiny model already scores above zero)."""

from __future__ import annotations

from typing import Any

import openai

from rltap.tree.links import AGENT_HEADER

MAX_TOKENS = 6


def cjk_share(text: str) -> float:
    chars = [c for c in text if not c.isspace()]
    return sum("\u4e00" <= c <= "\u9fff" for c in chars) / len(chars) if chars else 0.0


class Agent:
    async def run(self, data: Any, **proxy: Any) -> float:
        client = openai.AsyncOpenAI(
            base_url=proxy.get("base_url"),
            api_key=proxy.get("api_key"),
            http_client=proxy.get("http_client"),
        )

        async def say(agent: str, prompt: str) -> str:
            completion = await client.chat.completions.create(
                model="policy",
                messages=[{"role": "user", "content": prompt}],
                max_tokens=MAX_TOKENS,
                temperature=1.0,
                extra_headers={AGENT_HEADER: agent},
            )
            return completion.choices[0].message.content or ""

        written = await say("writer", data["prompt"])
        critique = await say("critic", f"Critique: {written}")
        await say("helper", f"Summarise: {critique}")
        return (cjk_share(written) + cjk_share(critique)) / 2
