"""Tokens/s of the embedded TransformersEngine vs transformers `generate()`, side by side.

Same tiny model, same prompts, same sampling (temperature, no top-k/top-p), same number of new
tokens, one torch thread, in one run. At 8 concurrent requests the engine batches them in its
decode loop; `generate()` is shown the way a naive server would serve them (one call per
request, in turn) and, for reference, as one static batch of 8 left-padded prompts (which a
server can only do when requests arrive together and finish together).

With `--prefill` it compares the engine with itself instead: 8 requests arriving together,
prefilled in one left-padded forward (the default) or each alone (`prefill_batch_size=1`), on
the same model object; tokens/s and the mean time to first token, runs alternating.
`--system-tokens N` puts an N-token system prompt before each question (agent prompts are
long); `--smollm2-shape` runs a random-weight model of SmolLM2-135M's shape (Llama, 30 layers,
hidden 576, vocab 49,152: the same compute, nothing downloaded; prompt ids are taken modulo
its vocabulary), `--model DIR` a model folder. `--same-prompt` sends one prompt 8 times, as a
GRPO group does (the batched prefill computes it once).

    .venv/bin/python bench/engine_throughput.py           # 64 new tokens, best of 3
    .venv/bin/python bench/engine_throughput.py --quick   # CI-sized
    .venv/bin/python bench/engine_throughput.py --prefill --smollm2-shape --system-tokens 200
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from rltap.engines.transformers import TransformersEngine
from rltap.record.types import ModelRequest
from rltap.testing.models import cached_tiny_model_dir

__all__ = ["main"]

# SmolLM2-135M-Instruct's config.json, less what does not change the compute.
SMOLLM2_SHAPE: dict[str, Any] = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}
FILLER = "You are a careful assistant. Think step by step and use the tools you are given. "

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


async def engine_first_tokens(
    engine: TransformersEngine, prompts: list[list[int]], new_tokens: int, temperature: float
) -> tuple[float, float]:
    """Every prompt sent at once: (tokens/s over all of them, mean seconds to a first token)."""
    started = time.perf_counter()

    async def one(seed: int, ids: list[int]) -> tuple[int, float]:
        request = ModelRequest(
            input_ids=ids, max_new_tokens=new_tokens, temperature=temperature, seed=seed
        )
        first, made = 0.0, 0
        async for chunk in engine.stream(request):
            if made == 0:
                first = time.perf_counter() - started
            made += len(chunk.token_ids)
        return made, first

    results = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    elapsed = time.perf_counter() - started
    return sum(made for made, _ in results) / elapsed, statistics.mean(f for _, f in results)


def load(args: argparse.Namespace) -> tuple[Any, Any, list[list[int]]]:
    """The model (fp32, eval), its tokenizer and the chat prompts of `QUESTIONS`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    torch.set_num_threads(args.threads)
    model_dir = args.model or cached_tiny_model_dir()
    model: Any
    if args.smollm2_shape:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(LlamaConfig(**SMOLLM2_SHAPE))
    else:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    tokenizer: Any = AutoTokenizer.from_pretrained(str(model_dir))
    system = tokenizer.decode(tokenizer.encode(FILLER * args.system_tokens)[: args.system_tokens])
    vocab = int(model.get_input_embeddings().weight.shape[0])
    prompts: list[list[int]] = [
        [
            token % vocab
            for token in tokenizer.apply_chat_template(
                [{"role": "system", "content": system}] * bool(system)
                + [{"role": "user", "content": q}],
                add_generation_prompt=True,
                return_dict=False,
            )
        ]
        for q in QUESTIONS
    ]
    return model, tokenizer, prompts


async def measure_prefill(args: argparse.Namespace) -> list[tuple[str, float, float]]:
    """(prefill, best tok/s, best mean time to first token) rows, 8 requests arriving together."""
    model, tokenizer, prompts = load(args)
    if args.same_prompt:
        prompts = [prompts[-1]] * len(prompts)
    engines = {
        label: TransformersEngine(
            model, tokenizer=tokenizer, eos_token_ids=[], num_threads=args.threads, **options
        )
        for label, options in (
            ("each request alone", {"prefill_batch_size": 1}),
            ("batched", {}),
        )
    }
    n, t = args.tokens, args.temperature
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label in engines}
    try:
        for engine in engines.values():  # warm-up: lazy initialisation
            await engine_first_tokens(engine, prompts[:2], 4, t)
        for _ in range(args.repeats):  # alternating, so drift in the machine's load hits both
            for label, engine in engines.items():
                runs[label].append(await engine_first_tokens(engine, prompts, n, t))
    finally:
        for engine in engines.values():
            await engine.close()
    return [
        (label, max(rate for rate, _ in done), min(ttft for _, ttft in done))
        for label, done in runs.items()
    ]


async def measure(args: argparse.Namespace) -> list[tuple[str, float, float]]:
    """(scenario, engine tok/s, generate() tok/s) rows."""
    model, tokenizer, prompts = load(args)
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


def model_label(args: argparse.Namespace) -> str:
    if args.smollm2_shape:
        return "SmolLM2-135M's shape, random weights"
    if args.model is not None:
        return str(args.model.name)
    return "tiny Qwen2 (hidden 64, 2 layers, vocab 151,936)"


def main() -> None:
    """Parse the flags, run the comparison, print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 new tokens, 1 repeat")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per request")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (best is shown)")
    parser.add_argument("--temperature", type=float, default=1.0, help="0 for greedy")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--prefill", action="store_true", help="batched vs per-request prefill in the engine"
    )
    parser.add_argument(
        "--model", type=Path, default=None, help="model folder (default: the tiny test model)"
    )
    parser.add_argument(
        "--smollm2-shape", action="store_true", help="random weights in SmolLM2-135M's shape"
    )
    parser.add_argument(
        "--same-prompt", action="store_true", help="--prefill: one prompt 8 times (a GRPO group)"
    )
    parser.add_argument(
        "--system-tokens", type=int, default=0, help="a system prompt of this many tokens"
    )
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.repeats = 16, 1
    if args.prefill:
        print_prefill(args, asyncio.run(measure_prefill(args)))
        return
    rows = asyncio.run(measure(args))
    table = Table(
        title=f"{args.tokens} new tokens/request, temperature {args.temperature}",
        caption=(
            f"{model_label(args)}, fp32 CPU, {args.threads} torch "
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


def print_prefill(args: argparse.Namespace, rows: list[tuple[str, float, float]]) -> None:
    """One table: each prefill's tokens/s and time to first token, against prefill alone."""
    table = Table(
        title=(
            f"8 concurrent requests ({'one prompt' if args.same_prompt else 'distinct prompts'}, "
            f"{args.system_tokens}-token system prompt) arriving together, {args.tokens} new "
            f"tokens each, temperature {args.temperature}"
        ),
        caption=(
            f"{model_label(args)}, fp32 CPU, {args.threads} torch thread; best of "
            f"{args.repeats} alternating runs"
        ),
    )
    for column in ("prefill", "tok/s", "time to first token", "tok/s ratio", "TTFT ratio"):
        table.add_column(column, justify="left" if column == "prefill" else "right")
    _, base_rate, base_ttft = rows[0]
    for label, rate, ttft in rows:
        table.add_row(
            label,
            f"{rate:.0f}",
            f"{ttft * 1000:.1f} ms",
            f"{rate / base_rate:.2f}x",
            f"{base_ttft / ttft:.2f}x",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
