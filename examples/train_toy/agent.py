"""A toy task to watch a policy learn in a few CPU minutes: write in Chinese characters.

The agent asks for a short reply (8 tokens, temperature 1.0); the reward is the share of the
reply's characters that are CJK ideographs. A random tiny model already writes a few of them
(its 151,936-token vocabulary is full of Chinese words), so answers to one prompt differ in
reward and a group-normalised policy gradient has something to go on; within tens of steps the
share climbs. (The issue's example, the share of digits, starts at zero for a random model: a
group of all-zero rewards carries no signal.)

    rltap train examples/train_toy/agent.py:Agent --data examples/train_toy/data.jsonl \\
        --model "$(rltap models tiny /tmp/tiny)" --out /tmp/run --steps 20 --lr 1e-3
"""

from __future__ import annotations

from typing import Any

import openai

MAX_TOKENS = 8


def cjk_share(text: str) -> float:
    """The share of `text`'s non-space characters that are CJK unified ideographs."""
    chars = [c for c in text if not c.isspace()]
    return sum("\u4e00" <= c <= "\u9fff" for c in chars) / len(chars) if chars else 0.0


class Agent:
    """One call per episode; the reward is `cjk_share` of the reply.

    Inline (`--mode inline`) the proxy's base_url, api_key and http_client come as keyword
    arguments; in a subprocess (`--mode subproc`) none do, and the OpenAI client reads
    OPENAI_BASE_URL and OPENAI_API_KEY, which the worker sets for the episode."""

    async def run(self, data: Any, **proxy: Any) -> float:
        client = openai.AsyncOpenAI(
            base_url=proxy.get("base_url"),
            api_key=proxy.get("api_key"),
            http_client=proxy.get("http_client"),
        )
        completion = await client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": data["prompt"]}],
            max_tokens=MAX_TOKENS,
            temperature=1.0,
        )
        return cjk_share(completion.choices[0].message.content or "")
