"""rltap agents the tests run inside verl's agent loop (loaded by name, as verl's config names
them: "verl_agents:ForkingAgent" or ".../verl_agents.py:ForkingAgent")."""

from __future__ import annotations

from typing import Any

import openai


class ForkingAgent:
    """One question, then two follow-ups that each continue the first reply (two branches of
    one episode), rewarded 0.25 and 1.0 by interaction id. `rewards` keeps each episode's
    {interaction id: reward}, `first_ids` its first call's id, `base_urls` the proxy it used."""

    def __init__(self, max_tokens: int = 8) -> None:
        self.max_tokens = max_tokens
        self.rewards: list[dict[str, float]] = []
        self.first_ids: list[str] = []
        self.base_urls: list[str] = []

    async def run(self, data: dict[str, Any], **kwargs: Any) -> dict[str, float]:
        self.base_urls.append(str(kwargs["base_url"]))
        client = openai.AsyncOpenAI(max_retries=0, **kwargs)
        first = [{"role": "user", "content": data["question"]}]
        reply = await client.chat.completions.create(
            model="tiny",
            messages=first,  # type: ignore[arg-type]
            max_tokens=self.max_tokens,
        )
        said = {"role": "assistant", "content": reply.choices[0].message.content}
        rewards: dict[str, float] = {}
        for follow_up, reward in (("and twice that?", 0.25), ("and half?", 1.0)):
            messages = [*first, said, {"role": "user", "content": follow_up}]
            answer = await client.chat.completions.create(
                model="tiny",
                messages=messages,  # type: ignore[arg-type]
                max_tokens=self.max_tokens,
            )
            rewards[answer.id] = reward
        self.first_ids.append(reply.id)
        self.rewards.append(rewards)
        return rewards


class FlakyAgent(ForkingAgent):
    """Fails the rows whose question starts with "fail", forks on the others."""

    async def run(self, data: dict[str, Any], **kwargs: Any) -> dict[str, float]:
        if str(data["question"]).startswith("fail"):
            msg = f"flaked on {data['question']!r}"
            raise RuntimeError(msg)
        return await super().run(data, **kwargs)


class BrokenAgent:
    """Fails every episode before any LLM call."""

    async def run(self, data: dict[str, Any], **kwargs: Any) -> float:
        msg = f"no calculator for {data.get('question')!r}"
        raise RuntimeError(msg)


class SilentAgent:
    """Makes no LLM call: an episode with nothing to train on."""

    async def run(self, data: dict[str, Any], **kwargs: Any) -> None:
        return None


async def ask(connection: dict[str, Any], content: str, **options: Any) -> None:
    """One call of 8 tokens at most to the proxy the agent was handed."""
    client = openai.AsyncOpenAI(max_retries=0, **connection)
    messages = [{"role": "user", "content": content}]
    await client.chat.completions.create(model="tiny", messages=messages, max_tokens=8, **options)  # type: ignore[arg-type]


class WordyRewardAgent:
    """Makes a call, then returns its reward as words, which rltap cannot place."""

    async def run(self, data: dict[str, Any], **kwargs: Any) -> str:
        await ask(kwargs, "hi")
        return "good job"


class GrammarAgent:
    """Asks for a JSON-schema reply, which verl's servers cannot constrain."""

    async def run(self, data: dict[str, Any], **kwargs: Any) -> float:
        schema = {"name": "Number", "schema": {"type": "integer"}}
        await ask(
            kwargs, "a number?", response_format={"type": "json_schema", "json_schema": schema}
        )
        return 1.0


# The instances the tests name ("verl_agents:FORKING"), so they can read what the agent saw.
FORKING = ForkingAgent()
