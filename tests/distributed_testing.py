"""The program each trainer rank of tests/train/test_distributed.py runs (an importable module:
the launcher spawns the ranks, which import their entry point by name).

`train_ranks` builds the tiny model (LoRA with `lora_rank` > 0) with a fixed seed, trains it two
steps on `fixed_packs()` and writes the whole state dict after each step from rank 0
(`OUT/step-K.pt`); it returns the steps' metrics. One process (world size 1) runs the very same
function, without a process group.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch.distributed.fsdp import FSDPModule
from transformers import AutoModelForCausalLM

from rltap.config import LoraConfig, UpdateConfig
from rltap.record.pack import TreePack, pack_interactions
from rltap.testing.packs import recorded_call as call
from rltap.train.distributed import Ranks
from rltap.train.gather import full_state_dict
from rltap.train.launcher import process_group
from rltap.train.lora import lora_model
from rltap.train.trainer import PolicyTrainer

# Small micro-batches: packs split at branch points, several micro-batches per rank, and
# ranks with fewer of them than another (filler micro-batches).
MICRO_BATCH_TOKENS = 24


def fixed_packs() -> list[TreePack]:
    """Five trees of 10 to 40 tokens: a prompt sampled 2 to 4 times, some replies continued,
    distinct rewards and behaviour logprobs unlike the model's."""
    packs = []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        prompt = [int(t) for t in rng.integers(1, 900, 3 + seed)]
        calls = []
        for branch in range(2 + seed % 3):
            first = call(prompt, [int(t) for t in rng.integers(1, 900, 2 + branch)])
            calls.append(first)
            if branch % 2 == 0:
                calls.append(call([7, 8], [int(t) for t in rng.integers(1, 900, 3)], first))
        rewards = {c.interaction_id: float(rng.normal()) for c in calls}
        pack = pack_interactions(calls, rewards)
        generated = pack.loss_mask == 1
        pack.logprobs[generated] = -rng.uniform(5.0, 15.0, generated.sum())
        packs.append(pack)
    return packs


def two_steps(trainer: PolicyTrainer, ranks: Ranks, out: str) -> list[dict[str, float]]:
    """Two steps on `fixed_packs()`; rank 0 writes the whole state dict after each
    (`OUT/step-K.pt`); the steps' metrics."""
    metrics = []
    for step in range(2):
        metrics.append(trainer.step(fixed_packs(), version=step))
        weights = full_state_dict(trainer.model)
        if ranks.rank == 0:
            torch.save(weights, Path(out) / f"step-{step}.pt")
    return metrics


def assert_two_steps_trained(run: Path, model_dir: Path) -> None:
    """What a 2-step `rltap train` run on the tiny model leaves in RUN: a metrics line per step
    with its version, step 2's episodes on the weights of step 1's sync, and a checkpoint of
    the trained weights, whole."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert [line["version"] for line in lines] == [1.0, 2.0]
    assert all(line["tokens"] > 0 for line in lines)
    batch = load_file(str(run / "rollouts" / "step-2" / "batch.safetensors"))
    assert {int(v) for v in batch["versions"][batch["loss_mask"].bool()]} == {1}
    saved = AutoModelForCausalLM.from_pretrained(str(run / "step-2")).state_dict()
    initial = AutoModelForCausalLM.from_pretrained(str(model_dir)).state_dict()
    assert any(not torch.equal(value, initial[name]) for name, value in saved.items())


def train_ranks(
    model_dir: str, out: str, lora_rank: int, minibatches: int, kl_coef: float = 0.0
) -> list[Any]:
    """Two steps on `fixed_packs()` in this rank; rank 0 saves the weights after each. With
    `kl_coef`, a KL penalty to the initial model (a reference model, sharded as the policy)."""
    torch.set_num_threads(1)
    with process_group() as ranks:
        torch.manual_seed(0)
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
        if lora_rank:
            model = lora_model(model, LoraConfig(lora_rank=lora_rank), base=model_dir)
        update = UpdateConfig(
            lr=1e-2,
            algo="ppo",
            minibatches=minibatches,
            micro_batch_tokens=MICRO_BATCH_TOKENS,
            kl_coef=kl_coef,
        )
        reference = None
        if kl_coef and not lora_rank:  # a LoRA model's reference is its base model
            reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
            reference.eval().requires_grad_(False)
        trainer = PolicyTrainer(model, update, ranks=ranks, reference=reference)
        # under a launcher, even alone, the trainer runs FSDP2
        assert isinstance(trainer.scorer, FSDPModule) == ranks.group
        return two_steps(trainer, ranks, out)


def fail_in_rank(failing: int) -> None:
    """Raise in rank `failing` (the launcher must name it), return in the others."""
    rank = int(os.environ["RANK"])
    if rank == failing:
        msg = f"rank {rank} fails"
        raise ValueError(msg)


def die_in_rank(dying: int) -> None:
    """Rank `dying` prints a line, then kills itself with SIGKILL (no Python error, no error
    file: what the OOM killer does); the others wait in a collective for it."""
    import signal
    import sys

    with process_group(timeout=60) as ranks:
        if ranks.rank == dying:
            print(f"rank {dying} is about to die", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        torch.distributed.barrier()


def backend_of(asked: str) -> str:
    """The backend `process_group(asked)` runs."""
    with process_group(asked):  # type: ignore[arg-type]
        return str(torch.distributed.get_backend())


def train_precision_ranks(
    model_dir: str, out: str, precision: dict[str, Any], lr: float = 1e-2
) -> list[Any]:
    """`train_ranks` (full fine-tuning, one minibatch) with `PrecisionConfig(**precision)`;
    rank 0 saves the weights after each step and returns, with the metrics, the step-0
    logprobs of every pack's generated tokens (the policy's before any update)."""
    from rltap.config.train import PrecisionConfig
    from rltap.train.forward import packed_logprobs

    torch.set_num_threads(1)
    with process_group() as ranks:
        torch.manual_seed(0)
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
        update = UpdateConfig(lr=lr, algo="ppo", micro_batch_tokens=MICRO_BATCH_TOKENS)
        trainer = PolicyTrainer(model, update, ranks=ranks, precision=PrecisionConfig(**precision))
        compute = torch.autocast("cpu", dtype=torch.bfloat16, enabled=trainer.autocast)
        with torch.no_grad(), compute:  # every rank: FSDP2's forward is a collective
            logprobs = [packed_logprobs(trainer.scorer, pack) for pack in fixed_packs()]
        return [two_steps(trainer, ranks, out), [values.float() for values in logprobs]]
