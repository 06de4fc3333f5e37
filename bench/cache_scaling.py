"""How the cost of recording one interaction grows with the session and with the conversation.

Scenarios (each prints microseconds per insert = parent resolution + insert + completion):

- branching: a fixed 40-message conversation and N interactions branching from random points of it
  (tree search, n-sampling). The cost must not grow with N: the ratio N=2000 / N=250 must be <= 1.5.
- transcript: a fixed 20-step ReAct trajectory and N calls, each carrying the trajectory up to a
  random step re-rendered inside one user message (DSPy's ReAct, LlamaIndex's structured output):
  no prefix, no exact reply, so every call is linked by the `carry` rule, which reads the words of
  the whole transcript. The ratio N=2000 / N=250 must be <= 1.5 here too.
- chain: one conversation growing turn by turn to 2000 interactions (4000 messages); cost per
  insert and per message at M = 500, 1000, 2000, 4000 messages: linear in M, small constant.

Run: .venv/bin/python bench/cache_scaling.py [--check]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from rltap.record.types import InteractionWithTokenLogpReward, ModelResponse
from rltap.tree.cache import InteractionCache

BRANCH_SIZES = (250, 500, 1000, 2000)
CHAIN_POINTS = (500, 1000, 2000, 4000)
TEXT = "The quick brown fox jumps over the lazy dog while the agent thinks about tools. " * 3


def _message(role: str, index: int) -> dict[str, Any]:
    return {"role": role, "content": f"{index}: {TEXT}"}


def _record(cache: InteractionCache, messages: list[dict[str, Any]], reply: dict[str, Any]) -> None:
    node = cache.add(InteractionWithTokenLogpReward(messages=messages))
    response = ModelResponse(
        input_tokens=[1, 2, 3], output_tokens=[4], output_logprobs=[-0.1], output_versions=[0]
    )
    cache.complete(node.interaction_id, response, [reply])


def _trunk(length: int) -> list[dict[str, Any]]:
    return [_message("user" if i % 2 == 0 else "assistant", i) for i in range(length)]


def branching(n: int, seed: int = 0) -> float:
    """Mean microseconds per insert with n interactions branching off a 40-message trunk."""
    rng = random.Random(seed)
    trunk = _trunk(40)
    cache = InteractionCache()
    for end in range(1, 40, 2):  # the trunk's own turns, so that branches find parents
        _record(cache, trunk[:end], trunk[end])
    cuts = [rng.randrange(1, 41, 2) for _ in range(n)]
    elapsed = 0.0
    for i, cut in enumerate(cuts):
        messages = [*trunk[: cut - 1], _message("user", 1000 + i)]
        reply = _message("assistant", 2000 + i)
        start = time.perf_counter()
        _record(cache, messages, reply)
        elapsed += time.perf_counter() - start
    return elapsed / n * 1e6


def _thought(step: int) -> str:
    return f"Step {step}: I should look up fact number {step} and then add it to the running sum."


def _transcript(steps: int) -> str:
    parts = [
        f"[[ ## thought_{i} ## ]]\n{_thought(i)}\n[[ ## observation_{i} ## ]]\n{i}"
        for i in range(steps)
    ]
    return "question: what is the sum of the facts?\n\ntrajectory:\n" + "\n\n".join(parts)


def transcript(n: int, seed: int = 0) -> float:
    """Mean microseconds per insert with n calls carrying a 20-step trajectory's transcript."""
    rng = random.Random(seed)
    system = {"role": "system", "content": "Answer with next_thought, next_tool_name."}
    cache = InteractionCache()
    for step in range(20):  # the trajectory's own calls: each one's reply is step's thought
        messages = [system, {"role": "user", "content": _transcript(step)}]
        _record(cache, messages, {"role": "assistant", "content": _thought(step)})
    cuts = [rng.randrange(1, 21) for _ in range(n)]
    elapsed = 0.0
    for i, cut in enumerate(cuts):
        messages = [system, {"role": "user", "content": _transcript(cut)}]
        reply = {"role": "assistant", "content": f"Branch {i}: {TEXT}"}
        start = time.perf_counter()
        _record(cache, messages, reply)
        elapsed += time.perf_counter() - start
    return elapsed / n * 1e6


def chain(points: tuple[int, ...] = CHAIN_POINTS, window: int = 10) -> dict[int, float]:
    """Microseconds per insert when the conversation holds M messages, for each M in points."""
    cache = InteractionCache()
    messages: list[dict[str, Any]] = []
    timings: dict[int, list[float]] = {m: [] for m in points}
    for turn in range(max(points) // 2):
        messages = [*messages, _message("user", 2 * turn)]
        reply = _message("assistant", 2 * turn + 1)
        start = time.perf_counter()
        _record(cache, messages, reply)
        took = time.perf_counter() - start
        for m in points:
            if m - 2 * window <= len(messages) <= m:
                timings[m].append(took)
        messages = [*messages, reply]
    return {m: statistics.median(t) * 1e6 for m, t in timings.items()}


def _scaling(console: Console, title: str, scenario: Callable[..., float], repeats: int) -> float:
    """Print `scenario`'s microseconds per insert for each N (best of `repeats`); the ratio
    N=2000 / N=250."""
    per_insert = {n: min(scenario(n, seed=r) for r in range(repeats)) for n in BRANCH_SIZES}
    table = Table(title=title)
    table.add_column("N", justify="right")
    table.add_column("us / insert", justify="right")
    for n, us in per_insert.items():
        table.add_row(str(n), f"{us:.1f}")
    console.print(table)
    ratio = per_insert[BRANCH_SIZES[-1]] / per_insert[BRANCH_SIZES[0]]
    console.print(f"ratio N={BRANCH_SIZES[-1]} / N={BRANCH_SIZES[0]}: {ratio:.2f} (target <= 1.5)")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs per N")
    args = parser.parse_args()
    console = Console()

    ratios = [
        _scaling(console, "branching: 40-message trunk, N branches", branching, args.repeats),
        _scaling(
            console,
            "transcript: 20-step trajectory re-rendered in one message, N calls",
            transcript,
            args.repeats,
        ),
    ]

    chain_us = chain()
    table = Table(title="chain: one conversation growing to 2000 interactions")
    for column in ("M messages", "us / insert", "us / message"):
        table.add_column(column, justify="right")
    for m, us in chain_us.items():
        table.add_row(str(m), f"{us:.0f}", f"{us / m:.2f}")
    console.print(table)
    return 1 if args.check and max(ratios) > 1.5 else 0


if __name__ == "__main__":
    sys.exit(main())
