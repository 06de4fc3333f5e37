"""Full fine-tuning against LoRA (`rltap train --lora-rank`) on the same model and packs:
seconds per trainer step, peak memory, trainable parameters and the weight sync's payload.

Each configuration runs in a subprocess of its own, so its peak RSS (`resource.getrusage`'s
`ru_maxrss`) is its own: the model loaded (fp32), wrapped with a peft adapter for LoRA, one
warm-up `PolicyTrainer.step` and then `--steps` timed ones (median shown) on the same tree
pack shape (a 64-token prompt sampled twice, each sample continued twice: 416 tokens, one pack
per step). The payload is what `rltap.train.sync` hands an engine: for an embedded
engine the tensors (the whole state dict, or the adapter's `AdapterWeights`), for vLLM the
folder it writes (`save_pretrained` of the model, or of the adapter alone).

The model is SmolLM2-135M-Instruct converted as `rltap demo` does
(`rltap_dev.demo_model.cached_smollm2_dir`) when it is there, else a random model of SmolLM2's
shape (`--random` forces it). torch runs one thread per process, the configurations one
after the other.

Run: .venv/bin/python bench/lora_vs_full.py [--ranks 8 16] [--steps 3] [--random]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from rltap.engines.base import AdapterWeights, WeightFolder
from rltap.record.pack import TreePack, pack_interactions
from rltap.testing.packs import recorded_call

TARGETS = "all-linear"


def tree(seed: int) -> TreePack:
    """A 64-token prompt, 2 samples of 48 tokens, each continued twice by 16 + 48 more."""
    rng = np.random.default_rng(seed)

    def ids(n: int) -> list[int]:
        return [int(t) for t in rng.integers(10, 1000, n)]

    prompt = ids(64)
    calls = []
    for _ in range(2):
        first = recorded_call(prompt, ids(48))
        calls.append(first)
        calls.extend(recorded_call(ids(16), ids(48), first) for _ in range(2))
    rewards = {c.interaction_id: float(rng.normal()) for c in calls}
    pack = pack_interactions(calls, rewards)
    generated = pack.loss_mask == 1
    pack.logprobs[generated] = -rng.uniform(2.0, 8.0, int(generated.sum()))
    return pack


def smollm2_shaped() -> Any:
    """A random model of SmolLM2-135M's shape (LlamaForCausalLM, tied embeddings)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        tie_word_embeddings=True, rms_norm_eps=1e-5,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def load(model_dir: str | None) -> Any:
    if model_dir is None:
        return smollm2_shaped()
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")


def folder_bytes(model: Any) -> int:
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def worker(rank: int, model_dir: str | None, steps: int) -> dict[str, Any]:
    """One configuration, in this process: its figures as a dict."""
    from rltap.config import LoraConfig, UpdateConfig
    from rltap.train.lora import lora_model
    from rltap.train.sync import weight_source
    from rltap.train.trainer import PolicyTrainer

    torch.set_num_threads(1)
    model = load(model_dir)
    total = sum(p.numel() for p in model.parameters())
    if rank > 0:
        settings = LoraConfig(lora_rank=rank, lora_target_modules=TARGETS)
        model = lora_model(model, settings, base=model_dir or "smollm2-shaped")
    trainer = PolicyTrainer(model, UpdateConfig(lr=1e-5, micro_batch_tokens=4096))
    times = []
    for step in range(steps + 1):  # the first is the warm-up
        started = time.perf_counter()
        # version 0: the packs' tokens are all fresh (none left out as stale).
        metrics = trainer.step([tree(step)], version=0)
        assert metrics["tokens"] > 0
        times.append(time.perf_counter() - started)
    source = weight_source(model, state_dict=True, folder=Path("unused"))
    assert not isinstance(source, WeightFolder)
    tensors = source.tensors if isinstance(source, AdapterWeights) else source
    # Tied weights (SmolLM2's output layer is its embeddings) share one storage: counted once.
    unique = {t.data_ptr(): t.numel() * t.element_size() for t in tensors.values()}
    payload = sum(unique.values())
    return {
        "rank": rank,
        "tokens": len(tree(0).input_ids),
        "step_seconds": statistics.median(times[1:]),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "trainable": sum(p.numel() for p in trainer.parameters),
        "total": total,
        "payload_mb": payload / 2**20,
        "folder_mb": folder_bytes(model) / 2**20,
    }


def table(rows: list[dict[str, Any]], title: str) -> Table:
    full = rows[0]
    out = Table(title=title)
    columns = ("config", "s / step", "x full", "peak RSS MB", "x full", "trainable params",
               "% of model", "sync tensors MB", "sync folder MB")  # fmt: skip
    for column in columns:
        out.add_column(column, justify="right")
    for row in rows:
        name = "full fine-tuning" if row["rank"] == 0 else f"LoRA r{row['rank']} ({TARGETS})"
        out.add_row(
            name, f"{row['step_seconds']:.2f}", f"{row['step_seconds'] / full['step_seconds']:.2f}",
            f"{row['peak_rss_mb']:.0f}", f"{row['peak_rss_mb'] / full['peak_rss_mb']:.2f}",
            f"{row['trainable']:,}", f"{100 * row['trainable'] / row['total']:.2f}",
            f"{row['payload_mb']:.1f}", f"{row['folder_mb']:.1f}",
        )  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--steps", type=int, default=3, help="timed steps (after one warm-up)")
    parser.add_argument("--random", action="store_true", help="a random SmolLM2-shaped model")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.model_dir, args.steps)))
        return
    model_dir = None if args.random else _smollm2()
    rows = []
    for rank in (0, *args.ranks):
        command = [sys.executable, __file__, "--worker", str(rank), "--steps", str(args.steps)]
        if model_dir is not None:
            command += ["--model-dir", model_dir]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    name = "SmolLM2-135M-Instruct" if model_dir else "random SmolLM2-shaped model"
    title = f"{name}, fp32, 1 thread, {rows[0]['tokens']} tokens / step, median of {args.steps}"
    Console(width=150).print(table(rows, title))


def _smollm2() -> str | None:
    try:
        from rltap_dev.demo_model import cached_smollm2_dir, smollm2_cache_target

        return str(cached_smollm2_dir()) if smollm2_cache_target().exists() else None
    except (ImportError, FileNotFoundError):
        return None


if __name__ == "__main__":
    main()
