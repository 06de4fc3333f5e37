"""The embedded engine serving several LoRA adapters (a policy per agent, issue 40): decode
throughput of one batch mixing the requests of two adapters and the base model, against the
single-adapter run (no routing) and against a batch per adapter in turn.

Measured (2026-12-05, SmolLM2-135M-Instruct fp32, rank-8 adapters on every linear layer, 8
requests of a 35-40 token prompt x 32 greedy tokens, torch 2.13.0+cpu, 1 torch thread, 2 CPU
cores shared with another job, median of 3; two runs), seconds and against the first:

    single adapter, plain forward (today's path)    4.28 / 3.99 s   x1.00
    one named adapter on every row, routed          4.56 / 4.39 s   x1.07 / x1.10
    tutor / student / base mixed in one batch       5.10 / 5.15 s   x1.19 / x1.29
    a batch per adapter, one after the other       13.10 / 12.44 s  x3.06 / x3.12

Routing is peft's mixed-batch LoRA forward (`adapter_names`, one name per row): each LoRA layer
adds each adapter to its own rows, so a mixed batch costs one forward plus the adapters'
small matmuls, where grouping by adapter costs a forward per group.

Run: .venv/bin/python bench/adapter_routing.py [--requests 8] [--tokens 32] [--repeats 3]
     [--model FOLDER]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

from rltap.engines.transformers import TransformersEngine
from rltap.record.types import ModelRequest
from rltap.testing.adapters import random_adapter

PROMPT = list(range(100, 140))


def requests(policies: Sequence[str | None], tokens: int) -> list[ModelRequest]:
    return [
        ModelRequest(input_ids=PROMPT[i % 5 :], max_new_tokens=tokens, temperature=0.0, policy=p)
        for i, p in enumerate(policies)
    ]


async def timed(engine: TransformersEngine, batches: Sequence[list[ModelRequest]]) -> float:
    started = time.perf_counter()
    for batch in batches:
        await asyncio.gather(*map(engine.generate, batch))
    return time.perf_counter() - started


async def run(model: Any, n: int, tokens: int, repeats: int) -> None:
    single = TransformersEngine(copy.deepcopy(model), eos_token_ids=[])
    await single.update_weights(random_adapter(model, "default", 1, rank=8, scale=0.01))
    multi = TransformersEngine(copy.deepcopy(model), eos_token_ids=[])
    await multi.update_weights(random_adapter(model, "tutor", 1, rank=8, scale=0.01))
    await multi.update_weights(random_adapter(model, "student", 2, rank=8, scale=0.01))
    mixed = [("tutor", "student", None)[i % 3] for i in range(n)]
    grouped = [[p for p in mixed if p == q] for q in ("tutor", "student", None)]
    cases = {
        "single adapter, plain forward": (single, [requests([None] * n, tokens)]),
        "one named adapter on every row": (multi, [requests(["tutor"] * n, tokens)]),
        "tutor / student / base in one batch": (multi, [requests(mixed, tokens)]),
        "a batch per adapter, in turn": (multi, [requests(g, tokens) for g in grouped]),
    }
    for engine in (single, multi):
        await timed(engine, [requests([None] * 2, 4)])  # warm-up
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):  # the cases alternate: load drifts hit each alike
        for name, (engine, batches) in cases.items():
            times[name].append(await timed(engine, batches))
    first = statistics.median(next(iter(times.values())))
    for name, seconds in times.items():
        median = statistics.median(seconds)
        rate = n * tokens / median
        print(f"{name:40s} {median:6.2f} s  {rate:6.1f} tok/s  x{median / first:.2f}")
    await single.close()
    await multi.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", help="a model folder (default: SmolLM2 as `rltap demo` has it)")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    from rltap_dev.demo_model import cached_smollm2_dir

    torch.set_num_threads(1)
    folder = args.model or str(cached_smollm2_dir())
    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
    asyncio.run(run(model.eval(), args.requests, args.tokens, args.repeats))


if __name__ == "__main__":
    main()
