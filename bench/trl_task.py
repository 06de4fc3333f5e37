"""bench/trl_compare.py's single-turn task, the same for rltap and TRL: one user prompt, one
reply, reward = the share of the reply's letters that are vowels (a random tiny model and
SmolLM2 both score between 0 and 1, with spread inside a group, so GRPO has a signal).

No rltap import: TRL's side (bench/trl_side.py) imports it in TRL's own venv, where neither rltap
nor the OpenAI client is installed; rltap's side runs `Agent` through `rltap train`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PROMPTS", "Agent", "rows", "vowel_share"]

PROMPTS = (
    "Say something about the sea.",
    "Describe a mountain.",
    "Tell me about tea.",
    "Write one line about the moon.",
    "Name a colour and say why you like it.",
    "What is a river?",
    "Describe your favourite animal.",
    "Say hello to a friend.",
)


def vowel_share(text: str) -> float:
    """The share of `text`'s letters that are vowels (0.0 for a reply without letters)."""
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / len(letters) if letters else 0.0


def rows(count: int, max_tokens: int) -> list[dict[str, Any]]:
    """`count` rows: the prompts in order, round and round, each with the reply's token cap."""
    return [{"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens} for i in range(count)]


class Agent:
    """rltap's side: one chat completion through the proxy, its reply scored by
    `vowel_share` (the proxy's base_url, key and client come as keyword arguments inline)."""

    async def run(self, data: dict[str, Any], **proxy: Any) -> float:
        import openai  # rltap's venv only: TRL's side imports this module without it

        client = openai.AsyncOpenAI(
            base_url=proxy.get("base_url"),
            api_key=proxy.get("api_key"),
            http_client=proxy.get("http_client"),
        )
        completion = await client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": data["prompt"]}],
            max_tokens=data["max_tokens"],
            temperature=1.0,
        )
        return vowel_share(completion.choices[0].message.content or "")
