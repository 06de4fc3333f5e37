"""Per-token decode time of the embedded engine with and without a JSON schema, side by side.

The same 8 chat prompts go to one TransformersEngine at once (it batches them), unconstrained
and then under a JSON schema (llguidance's token mask on every row, every step), alternating,
in one run. The schema asks for an object holding a list of at least 50 items with a free
string and a boolean each, so no reply can complete before `--tokens`: both sides decode the
same number of steps with the same batch size, and the difference is the grammar's cost (mask
computation, masking, the matcher's advance, the per-request matcher compile). Goal: <= 1.3x.

    .venv/bin/python bench/constrained_decoding.py           # 64 new tokens, best of 3
    .venv/bin/python bench/constrained_decoding.py --quick   # CI-sized
"""

from __future__ import annotations

import argparse
import asyncio
import time
from importlib import metadata
from typing import Any

import llguidance
import torch
from engine_throughput import QUESTIONS
from rich.console import Console
from rich.table import Table

from rltap.engines.transformers import TransformersEngine
from rltap.record.types import Constraint, ModelRequest
from rltap.testing.models import cached_tiny_model_dir

__all__ = ["main"]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "steps": {
            "type": "array",
            "minItems": 50,
            "items": {
                "type": "object",
                "properties": {"title": {"type": "string"}, "done": {"type": "boolean"}},
                "required": ["title", "done"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["steps"],
    "additionalProperties": False,
}


def json_constraint() -> Constraint:
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        SCHEMA, defaults={"whitespace_flexible": False}
    )
    return Constraint(grammar=grammar, reason="response_format 'Plan'", json_schema=SCHEMA)


async def run_batch(
    engine: TransformersEngine,
    prompts: list[list[int]],
    new_tokens: int,
    temperature: float,
    constraint: Constraint | None,
) -> tuple[float, int]:
    """Seconds and tokens for every prompt sent at once."""
    requests = [
        ModelRequest(
            input_ids=p,
            max_new_tokens=new_tokens,
            temperature=temperature,
            seed=i,
            constraint=constraint,
        )
        for i, p in enumerate(prompts)
    ]
    started = time.perf_counter()
    responses = await asyncio.gather(*map(engine.generate, requests))
    elapsed = time.perf_counter() - started
    if constraint is not None:
        prefix = engine.tokenizer.decode(responses[0].output_tokens)
        assert prefix.startswith('{"steps":[{"'), prefix  # the grammar really applied
    return elapsed, sum(r.output_len for r in responses)


async def measure(args: argparse.Namespace) -> dict[str, tuple[float, int]]:
    """Best (seconds, tokens) per mode, the modes alternating run by run."""
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
        for q in QUESTIONS[: args.concurrency]
    ]
    engine = TransformersEngine(
        model, tokenizer=tokenizer, eos_token_ids=[], num_threads=args.threads
    )
    modes = {"no constraint": None, "JSON schema": json_constraint()}
    best: dict[str, tuple[float, int]] = {}
    try:
        # Warm-up: lazy initialisation, and llguidance's tokenizer (built once per engine).
        for constraint in modes.values():
            await run_batch(engine, prompts[:2], 4, args.temperature, constraint)
        for _ in range(args.repeats):
            for name, constraint in modes.items():
                n, t = args.tokens, args.temperature
                elapsed, tokens = await run_batch(engine, prompts, n, t, constraint)
                if name not in best or elapsed / tokens < best[name][0] / best[name][1]:
                    best[name] = (elapsed, tokens)
    finally:
        await engine.close()
    return best


def main() -> None:
    """Parse the flags, run the comparison, print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 new tokens, 1 repeat")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per request")
    parser.add_argument("--repeats", type=int, default=3, help="runs per mode (best is shown)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests sent at once")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 for greedy")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.repeats = 16, 1
    best = asyncio.run(measure(args))
    table = Table(
        title=(
            f"{args.concurrency} concurrent requests x {args.tokens} new tokens, "
            f"temperature {args.temperature}"
        ),
        caption=(
            f"tiny Qwen2 (hidden 64, 2 layers, vocab 151,936), fp32 CPU, {args.threads} torch "
            f"thread, llguidance {metadata.version('llguidance')}; best of {args.repeats} "
            "runs; schema: an object with >= 50 items {title: string, done: boolean}"
        ),
    )
    table.add_column("mode")
    table.add_column("tokens", justify="right")
    table.add_column("ms/token", justify="right")
    table.add_column("ms/step", justify="right")
    table.add_column("ratio", justify="right")
    base_seconds, base_tokens = best["no constraint"]
    base = base_seconds / base_tokens
    for name, (seconds, tokens) in best.items():
        per_token = seconds / tokens
        per_step = seconds / args.tokens
        table.add_row(
            name,
            str(tokens),
            f"{per_token * 1e3:.3f}",
            f"{per_step * 1e3:.2f}",
            f"{per_token / base:.2f}x",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
