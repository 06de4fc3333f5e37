"""Agents for the workflow tests, written the way users write them: the plain `openai` SDK.

Inline mode passes `base_url`, `api_key` and `http_client`; in subprocess mode they are None and
the SDK reads OPENAI_BASE_URL / OPENAI_API_KEY from the environment the worker set for the
episode. What an agent does is decided by its row, so one class serves many cases:

- `question`: the user message (each turn appends ` (turn N)`);
- `returns`: "reward" (the number in `reward`), "by_id" ({first reply id: `reward`}), "none",
  "unknown_id" ({an id of no reply: `reward`}) or "text" (a string: not a valid reward);
- `fail`, after the first reply: "raise" (an exception of its own), "api-error" (a request the
  proxy refuses, so the SDK raises), "exit" (os._exit(3)), "sys-exit"
  (sys.exit(3)), or "hang" (keep calling until the
  session is gone).

Setting CHAT_AGENT_EXIT_ON to a row's question ends the process on that row (os._exit(3)): in
inline mode that interrupts a whole `rltap rollout`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import openai

# Set to a row's question to end the process on that row (see `_fail_as_asked`).
EXIT_ON_ENV = "CHAT_AGENT_EXIT_ON"
ENV_KEYS = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")


class AgentBroke(RuntimeError):
    """What a failing agent raises."""


class ChatAgent:
    """`turns` user turns in one conversation; returns what the row asks for."""

    def __init__(self, turns: int = 2) -> None:
        self.turns = turns

    async def run(
        self,
        data: dict[str, Any],
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: Any = None,  # an httpx.AsyncClient (inline mode)
        **_: Any,
    ) -> Any:
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, http_client=http_client, max_retries=0
        )
        messages: list[Any] = []
        reply_ids: list[str] = []
        for turn in range(self.turns):
            messages.append({"role": "user", "content": f"{data['question']} (turn {turn})"})
            completion = await client.chat.completions.create(model="tiny", messages=messages)
            reply_ids.append(completion.id)
            messages.append({"role": "assistant", "content": completion.choices[0].message.content})
            if turn == 0:
                await _fail_as_asked(client, data)
        return _returned(data, reply_ids)


class SyncChatAgent:
    """A sync `run` (subprocess mode only) with the sync SDK client configured from the env."""

    def run(self, data: dict[str, Any], **_: Any) -> Any:
        client = openai.OpenAI(max_retries=0)
        messages = [{"role": "user", "content": data["question"]}]
        completion = client.chat.completions.create(model="tiny", messages=messages)  # type: ignore[arg-type]
        return _returned(data, [completion.id])


class EnvProbe:
    """Records the episode's environment during its run and after the worker restored it.

    Appends JSON lines {"name", "when", "pid", "env"} to the file `data["record"]`. The "after"
    line is written when the worker pickles run()'s return value to send it back: that happens
    after the episode's variables were restored, so it shows what the next episode would inherit.
    """

    async def run(self, data: dict[str, Any], **_: Any) -> Any:
        during = _environment()
        client = openai.AsyncOpenAI(max_retries=0)
        messages = [{"role": "user", "content": data["question"]}]
        await client.chat.completions.create(model="tiny", messages=messages)  # type: ignore[arg-type]
        _record(data, "during", during)
        return _RecordedAfterRestore(data, float(data["reward"]))


class _RecordedAfterRestore:
    def __init__(self, data: dict[str, Any], reward: float) -> None:
        self.data = data
        self.reward = reward

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        _record(self.data, "after", _environment())
        return float, (self.reward,)


def _environment() -> dict[str, str | None]:
    return {key: os.environ.get(key) for key in ENV_KEYS}


def _record(data: dict[str, Any], when: str, env: dict[str, str | None]) -> None:
    line = {"name": data["question"], "when": when, "pid": os.getpid(), "env": env}
    with Path(data["record"]).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


async def _fail_as_asked(client: openai.AsyncOpenAI, data: dict[str, Any]) -> None:
    if os.environ.get(EXIT_ON_ENV) == data["question"]:
        os._exit(3)  # an interrupted `rltap rollout`: inline, this ends the whole process
    fail = data.get("fail")
    if fail == "raise":
        msg = f"agent broke on {data['question']!r}"
        raise AgentBroke(msg)
    if fail == "api-error":  # the proxy answers 400: the SDK raises openai.BadRequestError
        await client.chat.completions.create(model="tiny", messages=[])
    if fail == "exit":
        os._exit(3)
    if fail == "sys-exit":
        sys.exit(3)
    if fail == "hang":
        # Keeps the episode busy until the workflow gives up on it and ends its session; then
        # the next call fails (the key is no longer valid) and the agent stops.
        messages = [{"role": "user", "content": "still there?"}]
        for _ in range(3000):
            await client.chat.completions.create(model="tiny", messages=messages)  # type: ignore[arg-type]
            await asyncio.sleep(0.02)


def _returned(data: dict[str, Any], reply_ids: list[str]) -> Any:
    returns = data.get("returns", "reward")
    if returns == "reward":
        return data["reward"]
    if returns == "by_id":
        return {reply_ids[0]: data["reward"]}
    if returns == "unknown_id":
        return {"chatcmpl-not-in-this-session": data["reward"]}
    if returns == "none":
        return None
    return f"reward me {data.get('reward')}"
