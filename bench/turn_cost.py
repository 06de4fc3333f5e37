"""Proxy CPU time per call at turn 1 and at turn 64 of one conversation (target ratio <= 1.5).

The whole per-call path of the proxy runs in process, minus the socket: parse the Chat
Completions body, find the parent, render (concat mode), generate with an instant engine, parse the
reply, record it, build and serialise the response. CPU time (thread time) per call is measured at
each turn of several conversations; the median at turn 1 and turn 64 are compared.

The conversations run one after another on one event loop, as calls do in a proxy that has been
up a while, after one conversation that is not counted: the first conversation of a process also
pays for growing its memory and for first calls, which made its turn 64 ~1.7x a later one's.

Run: .venv/bin/python bench/turn_cost.py [--conversations 16] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ChatConfig
from rltap.protocols import openai_chat
from rltap.session.session import Session
from rltap.testing.fakes import InstantEngine
from rltap.testing.models import cached_qwen_tokenizer_dir

TURNS = 64
QUESTION = "Please compute the next step of the plan and report what changed since last time."


async def one_conversation(renderer: ChatRenderer, engine: InstantEngine) -> list[float]:
    session = Session(engine, renderer, ChatConfig(max_context=1_000_000))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful agent."}]
    costs: list[float] = []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"{turn}: {QUESTION}"})
        raw = orjson.dumps({"model": "m", "messages": messages, "max_tokens": 16})
        started = time.thread_time()
        request = openai_chat.parse_request(orjson.loads(raw))
        generations = await session.generate(request)
        body = orjson.dumps(openai_chat.build_response(request, generations))
        costs.append(time.thread_time() - started)
        reply = orjson.loads(body)["choices"][0]["message"]
        messages.append({"role": "assistant", "content": reply["content"]})
    return costs


async def conversations(
    renderer: ChatRenderer, engine: InstantEngine, count: int
) -> list[list[float]]:
    await one_conversation(renderer, engine)  # warm-up, not counted
    return [await one_conversation(renderer, engine) for _ in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--check", action="store_true", help="exit 1 if the ratio is over 1.5")
    args = parser.parse_args()
    renderer = ChatRenderer.from_pretrained(cached_qwen_tokenizer_dir(), mode="concat")
    reply = renderer.tokenizer.encode("Done: the plan moved one step.", add_special_tokens=False)
    engine = InstantEngine(reply, renderer.end_of_turn_ids[-1])
    runs = asyncio.run(conversations(renderer, engine, args.conversations))
    at = {turn: statistics.median(run[turn - 1] for run in runs) * 1e3 for turn in (1, 8, 32, 64)}
    table = Table(title=f"proxy CPU per call, median of {args.conversations} conversations")
    table.add_column("turn", justify="right")
    table.add_column("messages", justify="right")
    table.add_column("CPU ms / call", justify="right")
    for turn, ms in at.items():
        table.add_row(str(turn), str(2 * turn), f"{ms:.3f}")
    console = Console()
    console.print(table)
    ratio = at[64] / at[1]
    console.print(f"ratio turn 64 / turn 1: {ratio:.2f} (target <= 1.5)")
    return 1 if args.check and ratio > 1.5 else 0


if __name__ == "__main__":
    sys.exit(main())
