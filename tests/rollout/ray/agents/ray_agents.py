"""Agents for the Ray tests, written the way users write them: the plain `openai` SDK.

Named by file path (`AGENTS_FILE:Name`), as `rltap rollout` names agents: every rollout actor
(and its subprocess workers) loads this file again by path. Each agent appends JSON lines
{"question", "event", "pid", "ppid", "via"} to the file `data["record"]`: "start" when its episode
starts, "done" when it returns; `via` is "kwargs" when the proxy's address came as arguments
(inline mode) and "env" when the worker's environment held it (subprocess mode). Inline, `pid` is
the rollout actor's process.

- `data["hold"]`, a path: the first episode to get there (after its first reply) writes its
  pid into that file and sleeps (the test kills its actor, or the driver); every later one goes on.
- `data["die"]`: the episode ends its process before its first call (inline: the actor's).

`ShortReplyAgent` records only "done".
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import openai

HOLD_SECONDS = 120.0


class RecordingAgent:
    """Two user turns in one conversation; the reward is `data["reward"]`."""

    async def run(
        self,
        data: dict[str, Any],
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: Any = None,
        **_: Any,
    ) -> float:
        via = "env" if base_url is None else "kwargs"
        _record(data, "start", via)
        if data.get("die"):
            os._exit(3)
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, http_client=http_client, max_retries=0
        )
        messages: list[Any] = []
        for turn in range(2):
            messages.append({"role": "user", "content": f"{data['question']} (turn {turn})"})
            completion = await client.chat.completions.create(model="tiny", messages=messages)
            messages.append({"role": "assistant", "content": completion.choices[0].message.content})
            if turn == 0:
                await _hold_once(data)
        _record(data, "done", via)
        return float(data["reward"])


async def _hold_once(data: dict[str, Any]) -> None:
    hold = data.get("hold")
    if hold:
        try:
            descriptor = os.open(hold, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(descriptor, str(os.getpid()).encode())
        os.close(descriptor)
        await asyncio.sleep(HOLD_SECONDS)


def _record(data: dict[str, Any], event: str, via: str) -> None:
    if "record" not in data:
        return
    line = {
        "question": data["question"],
        "event": event,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "via": via,
    }
    with Path(data["record"]).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


class ShortReplyAgent:
    """One call for an 8-token reply at temperature 1 (what `rltap train` learns from); the
    reward is the reply's share of letters among its characters."""

    async def run(
        self,
        data: dict[str, Any],
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: Any = None,
        **_: Any,
    ) -> float:
        via = "env" if base_url is None else "kwargs"
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, http_client=http_client, max_retries=0
        )
        completion = await client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": data["question"]}],
            max_tokens=8,
            temperature=1.0,
        )
        _record(data, "done", via)
        text = completion.choices[0].message.content or ""
        return sum(c.isalpha() for c in text) / max(1, len(text))
