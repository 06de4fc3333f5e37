"""Tokens/s of the embedded TransformersEngine vs transformers `generate()`, side by side.

Same tiny model, same prompts, same sampling (temperature, no top-k/top-p), same number of new
tokens, one torch thread, in one run. At 8 concurrent requests the engine batches them in its
decode loop; `generate()` is shown the way a naive server would serve them (one call per
request, in turn) and, for reference, as one static batch of 8 left-padded prompts (which a
server can only do when requests arrive together and finish together).

    .venv/bin/python bench/engine_throughput.py           # 64 new tokens, best of 3
    .venv/bin/python bench/engine_throughput.py --quick   # CI-sized
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from rltap.engines.transformers import TransformersEngine
from rltap.record.types import ModelRequest
from rltap.testing.models import cached_tiny_model_dir

__all__ = ["main"]

QUESTIONS = [
    "Hi",
    "What is 2 + 2?",
    "Name three rivers in Europe.",
    "Write a haiku about the sea.",
    "Summarise the plot of Hamlet in two sentences.",
    "List the planets of the solar system in order.",
    "Translate 'good morning' to French, German and Spanish.",
    "Explain how a hash map handles collisions with open addressing.",
]


async def best_rate(run: Callable[[], int | Awaitable[int]], repeats: int) -> float:
    """Best tokens/s over `repeats` runs of `run` (which returns how many tokens it made)."""
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        made = run()
        tokens = await made if inspect.isawaitable(made) else made
        rates.append(tokens / (time.perf_counter() - started))
    return max(rates)


def generate_kwargs(model: Any, new_tokens: int, temperature: float) -> dict[str, Any]:
    eos = model.generation_config.eos_token_id
    # min_new_tokens masks eos so every call makes exactly `new_tokens`, like the engine below.
    kwargs: dict[str, Any] = {
        "max_new_tokens": new_tokens,
        "min_new_tokens": new_tokens,
        "eos_token_id": eos,
        "pad_token_id": model.generation_config.pad_token_id,
    }
    if temperature > 0:
        kwargs |= {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    else:
        kwargs |= {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
    return kwargs


def hf_sequential(model: Any, prompts: list[list[int]], kwargs: dict[str, Any]) -> int:
    """A naive server: one generate() call per request, in turn."""
    made = 0
    with torch.inference_mode():
        for ids in prompts:
            out = model.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)), **kwargs
            )
            made += int(out.shape[1]) - len(ids)
    return made


def hf_static_batch(model: Any, prompts: list[list[int]], kwargs: dict[str, Any]) -> int:
    """All prompts left-padded into one generate() call."""
    width = max(map(len, prompts))
    pad = kwargs["pad_token_id"]
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, **kwargs)
    return int(out.shape[1] - width) * len(prompts)


async def engine_concurrent(
    engine: TransformersEngine, prompts: list[list[int]], new_tokens: int, temperature: float
) -> int:
    """Every prompt sent to the engine at once (it batches them in its decode loop)."""
    requests = [
        ModelRequest(input_ids=p, max_new_tokens=new_tokens, temperature=temperature, seed=i)
        for i, p in enumerate(prompts)
    ]
    responses = await asyncio.gather(*map(engine.generate, requests))
    return sum(r.output_len for r in responses)


async def measure(args: argparse.Namespace) -> list[tuple[str, float, float]]:
    """(scenario, engine tok/s, generate() tok/s) rows."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    model_dir = cached_tiny_model_dir()
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    tokenizer: Any = AutoTokenizer.from_pretrained(str(model_dir))
    prompts: list[list[int]] = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, return_dict=False
        )
        for q in QUESTIONS
    ]
    engine = TransformersEngine(
        model, tokenizer=tokenizer, eos_token_ids=[], num_threads=args.threads
    )
    n, t, r = args.tokens, args.temperature, args.repeats
    kwargs = generate_kwargs(model, n, t)
    # Warm-up: first calls pay for lazy initialisation on both sides.
    await engine_concurrent(engine, prompts[:2], 4, t)
    hf_sequential(model, prompts[:1], generate_kwargs(model, 4, t))
    rows = []
    try:
        for concurrency in (1, 8):
            batch = prompts[:concurrency]
            ours = await best_rate(functools.partial(engine_concurrent, engine, batch, n, t), r)
            theirs = await best_rate(functools.partial(hf_sequential, model, batch, kwargs), r)
            how = "1 request" if concurrency == 1 else "8 concurrent, generate() in turn"
            rows.append((how, ours, theirs))
        static = await best_rate(functools.partial(hf_static_batch, model, prompts, kwargs), r)
        rows.append(("8 concurrent, generate() batched", rows[-1][1], static))
    finally:
        await engine.close()
    return rows


def main() -> None:
    """Parse the flags, run the comparison, print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 new tokens, 1 repeat")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per request")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (best is shown)")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 for greedy")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.repeats = 16, 1
    rows = asyncio.run(measure(args))
    table = Table(
        title=f"{args.tokens} new tokens/request, temperature {args.temperature}",
        caption=(
            f"tiny Qwen2 (hidden 64, 2 layers, vocab 151,936), fp32 CPU, {args.threads} torch "
            f"thread; best of {args.repeats} runs"
        ),
    )
    table.add_column("scenario")
    table.add_column("engine tok/s", justify="right")
    table.add_column("generate() tok/s", justify="right")
    table.add_column("ratio", justify="right")
    for label, ours, theirs in rows:
        table.add_row(label, f"{ours:.0f}", f"{theirs:.0f}", f"{ours / theirs:.2f}x")
    Console().print(table)


if __name__ == "__main__":
    main()
