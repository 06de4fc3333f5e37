"""The trainer side of a `rltap train` run, built from its settings and the checkpoint it
resumes: one trainer over the ranks (`rltap.train.leader.RankLeader`, rank 0 leading the others,
which `follow_training` runs), or with `[policies]` a trainer per policy in this process
(`rltap.train.policy_leader.PolicyLeader`).

A checkpoint resumes only the kind of run that wrote it: a whole model, a LoRA adapter
(`--lora-rank`) or policies' adapters (`[policies]`, `run_state.json`'s `"policies"`); the
other kinds are a `TrainingFailed` naming what to resume it with, before anything is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rltap.config import TrainConfig
from rltap.train.distributed import Ranks
from rltap.train.leader import RankLeader, follow
from rltap.train.lora import LoraMismatch, is_adapter_folder, lora_model
from rltap.train.policy_leader import PolicyLeader
from rltap.train.policy_store import POLICIES_STATE
from rltap.train.run_dir import Checkpoint
from rltap.train.trainer import PolicyTrainer

__all__ = ["TrainingFailed", "follow_training", "run_leader"]


class TrainingFailed(RuntimeError):
    """The run cannot train: every episode of a step's rollouts failed, or its checkpoint is
    not of this run's kind."""


def run_leader(
    config: TrainConfig, checkpoint: Checkpoint | None, ranks: Ranks
) -> RankLeader | PolicyLeader:
    """Rank 0's trainer side, with the weights and AdamW state of `checkpoint` if any."""
    if config.policies:
        _check_kind(config, checkpoint)
        try:
            return PolicyLeader.build(config, checkpoint)
        except LoraMismatch as exc:
            raise TrainingFailed(str(exc)) from exc
    _share(ranks, checkpoint.path if checkpoint else None)  # first: the other ranks wait in it
    _check_kind(config, checkpoint)
    leader = RankLeader(_trainer(config, checkpoint.path if checkpoint else None), ranks)
    if checkpoint is not None:
        leader.load_optimizer(checkpoint.optimizer_path)
    return leader


def follow_training(config: TrainConfig) -> None:
    """A trainer rank > 0: its shard of the trainer, stepping as rank 0 tells it
    (`rltap.train.leader`)."""
    if config.loop.episodes.seed is not None:
        torch.manual_seed(config.loop.episodes.seed)
    follow(_trainer(config, _share(Ranks.current(), None)))


def _check_kind(config: TrainConfig, checkpoint: Checkpoint | None) -> None:
    if checkpoint is None:
        return
    saved_policies = POLICIES_STATE in checkpoint.state
    if saved_policies != bool(config.policies):
        kind = "with policies" if saved_policies else "without policies"
        msg = f"{checkpoint.path} was trained {kind}: resume it with the policies it had"
        raise TrainingFailed(msg)


def _share(ranks: Ranks, checkpoint: Path | None) -> Path | None:
    """The checkpoint the run resumes from, rank 0's (found in its run folder), on every rank."""
    if ranks.world == 1:
        return checkpoint
    box = [checkpoint]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _trainer(config: TrainConfig, checkpoint: Path | None) -> PolicyTrainer:
    """The run's trainer on --model, or on the weights (or adapter) of `checkpoint`; its
    optimizer state is loaded afterwards, by every rank at once (`RankLeader.load_optimizer`)."""
    from transformers import AutoModelForCausalLM

    lora = config.lora
    if checkpoint is not None and is_adapter_folder(checkpoint) != lora.enabled:
        kind = "a LoRA adapter" if lora.enabled else "a whole model"
        resume = "resume it with the --lora-rank it had"
        msg = f"{checkpoint.parent} was not trained as {kind}: {resume}"
        raise TrainingFailed(msg)
    if lora.enabled:  # the base model, with a new adapter or the checkpoint's
        base: Any = AutoModelForCausalLM.from_pretrained(config.model, dtype="float32")
        try:
            model = lora_model(base, lora, base=config.model, checkpoint=checkpoint)
        except LoraMismatch as exc:
            raise TrainingFailed(str(exc)) from exc
    else:
        source = str(checkpoint) if checkpoint else config.model
        model = AutoModelForCausalLM.from_pretrained(source, dtype="float32")
    reference: Any = None
    if config.update.kl_coef > 0 and not lora.enabled:  # a frozen copy of the initial weights
        reference = AutoModelForCausalLM.from_pretrained(config.model, dtype="float32")
        reference.eval().requires_grad_(False)
    return PolicyTrainer(
        model, config.update, config.loop, reference=reference, precision=config.precision
    )
