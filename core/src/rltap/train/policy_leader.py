"""`rltap train` with `[policies]`: what the loop steps, syncs and checkpoints in place of one
trainer (`rltap.train.leader.RankLeader`).

`PolicyLeader` holds the `PolicyTrainers` (a LoRA adapter and an AdamW per policy over one base
model, `rltap.train.policies`) and answers the loop as a `RankLeader` does: `step(packs,
version)` trains each policy on its own agents' tokens (the policy each exported call carries,
`TreePack.policy_mask`), `push(sync)` moves the adapters that step changed into the engine,
each at its own version (`rltap.train.policy_store.PolicySync`), `save_checkpoint` writes every
policy's adapter and AdamW state, and `model` is the peft model the engine's copy starts from.
Policies train in one process (`TrainConfig` refuses `--ray` and `--nproc-per-node` with them).

The per-policy metrics are `<policy>/<metric>`: the trainer's (`loss`, `kl`, `entropy`,
`tokens`, ...), `<policy>/version`, and from the exported calls (`policy_rewards`) the mean
reward of the policy's calls, `<policy>/reward_mean` (with `eval_` before `reward_mean` for a
held-out evaluation's). The step's own `loss`, `kl`, `entropy`, `tokens`, ... are over every
policy (`_overall`), so a run's table reads as a single policy's does.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rltap.config import TrainConfig
from rltap.config.policies import Policies
from rltap.record.pack import TreePack
from rltap.train.policies import PolicyTrainers, policy_model
from rltap.train.policy_store import (
    PolicySync,
    check_policies_checkpoint,
    load_optimizers,
    save_policies,
)
from rltap.train.run_dir import Checkpoint, RunDir

__all__ = ["PolicyLeader", "policy_rewards", "seen_agents"]


def policy_rewards(
    lines: Iterable[Mapping[str, Any]], policies: Policies, *, prefix: str = ""
) -> dict[str, float]:
    """`<policy>/<prefix>reward_mean`: the mean (discounted) reward of the exported calls
    (`lines`, one per call) of each policy that made one."""
    rewards: dict[str, list[float]] = {name: [] for name in policies}
    for line in lines:
        policy = line.get("policy")
        if policy in rewards:
            rewards[policy].append(float(line.get("reward") or 0.0))
    return {
        f"{name}/{prefix}reward_mean": statistics.fmean(values)
        for name, values in rewards.items()
        if values
    }


def seen_agents(lines: Iterable[Mapping[str, Any]]) -> set[str | None]:
    """The agent ids the exported calls (`lines`) carried."""
    return {line.get("agent_id") for line in lines}


@dataclass(slots=True)
class PolicyLeader:
    """The loop's trainer side with policies (module docstring)."""

    trainers: PolicyTrainers
    changed: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, config: TrainConfig, checkpoint: Checkpoint | None) -> PolicyLeader:
        """The policies' adapters over --model: new ones, or `checkpoint`'s (refused,
        `PolicyMismatch`, when its policies or ranks are not the run's), AdamW states loaded."""
        from transformers import AutoModelForCausalLM

        policies = config.policies
        assert policies is not None
        versions = check_policies_checkpoint(checkpoint, policies) if checkpoint else None
        base: Any = AutoModelForCausalLM.from_pretrained(config.model, dtype="float32")
        model = policy_model(
            base,
            policies,
            config.lora,
            base=config.model,
            checkpoint=checkpoint.path if checkpoint else None,
        )
        trainers = PolicyTrainers(
            model,
            policies,
            config.update,
            config.loop,
            precision=config.precision,
            versions=versions,
        )
        if checkpoint is not None:
            load_optimizers(trainers, checkpoint)
        return cls(trainers)

    @property
    def model(self) -> Any:
        return self.trainers.model

    def step(self, packs: Sequence[TreePack], version: int) -> dict[str, float]:
        """Each policy's step on its tokens of `packs` (each at its own version: `version`,
        the loop's count of steps, is not theirs)."""
        metrics, self.changed = self.trainers.step(packs, TreePack.policy_mask)
        return {**metrics, **_overall(metrics, list(self.trainers.trainers))}

    async def push(self, sync: PolicySync) -> dict[str, float]:
        """The changed adapters into the engine; returns each policy's version as a metric."""
        await sync.push(self.trainers, self.changed)
        self.changed = []
        return {f"{name}/version": float(v) for name, v in self.trainers.versions.items()}

    async def push_all(self, sync: PolicySync) -> None:
        """Every trained policy's adapter into the engine, at its version (a resumed run's
        engine starts from --model; a policy still at version 0 is the base model there)."""
        versions = self.trainers.versions
        await sync.push(self.trainers, [name for name, v in versions.items() if v > 0], again=True)

    def save_checkpoint(
        self, run: RunDir, step: int, tokenizer: Any, state: Mapping[str, Any]
    ) -> Checkpoint:
        return save_policies(run, step, self.trainers, tokenizer, state)

    def stop(self) -> None:
        """Nothing to tell: the policies train in this process alone."""


def _overall(metrics: Mapping[str, float], names: list[str]) -> dict[str, float]:
    """The step's trainer metrics over every policy: counts summed, the others weighted by
    each policy's tokens, the gradient norm the largest (each policy clips its own)."""
    tokens = [metrics[f"{name}/tokens"] for name in names]
    total = sum(tokens)

    def weighted(key: str) -> float:
        values = [metrics[f"{name}/{key}"] for name in names]
        return sum(v * n for v, n in zip(values, tokens, strict=True)) / total if total else 0.0

    overall = {key: weighted(key) for key in ("loss", "kl", "entropy", "clip_fraction")}
    overall["tokens"] = float(total)
    overall["stale_tokens"] = float(sum(metrics[f"{name}/stale_tokens"] for name in names))
    overall["grad_norm"] = max(metrics[f"{name}/grad_norm"] for name in names)
    return overall
