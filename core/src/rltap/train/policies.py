"""Training several policies (`rltap train`'s `[policies]`): a LoRA adapter per policy over one
base model, and a trainer per adapter.

`policy_model(model, policies, lora, base=...)` is the base model with one peft adapter
per policy, named after it, at the policy's rank (`--lora-alpha` and `--lora-target-modules`
apply to every adapter): peft's `get_peft_model` for the first, `add_adapter` for the others.
`PolicyTrainers(model, policies, update, loop)` holds one `PolicyTrainer` per policy on that
model: its own AdamW over its adapter's parameters only, its own learning rate and KL
coefficient (`PolicyConfig.update`), every forward of its step run with its adapter active
(peft's `set_adapter`) and its KL reference the base model (every adapter disabled).

`PolicyTrainers.step(packs, tokens_of)` trains each policy on its own agents' tokens:
`tokens_of(pack, policy)` says which of a pack's tokens are the policy's (a boolean or 0/1 per
token): `TreePack.policy_mask`, from the policy each exported call carries, or
`by_interaction`, from a mapping of interaction id to policy. Each policy steps on the packs
that hold some of its tokens, their loss mask narrowed to them (advantages still come from
the whole pack: the episode's reward is cooperative), at its own version (`versions`: the
tokens of a policy carry its version); a policy with no token this step does not step, and
its adapter stays as it was. The step
returns the metrics, each named `<policy>/<metric>` (`loss`, `kl`, `entropy`, `tokens`, ...),
and the policies it changed: the ones whose adapter a sync must move
(`rltap.train.policy_store.PolicySync`), which also moves their versions.

At world size > 1 (FSDP2) the trainers would each shard the one model: not supported yet.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rltap._lazy import require_module
from rltap.config.flags import ConfigError
from rltap.config.policies import Policies
from rltap.config.train import LoopConfig, LoraConfig, PrecisionConfig, UpdateConfig
from rltap.engines.lora import LORA_EXTRA, adapter_of_tensor
from rltap.record.pack import TreePack
from rltap.train.distributed import Ranks
from rltap.train.forward import Attention
from rltap.train.lora import LoraMismatch, adapter_config, resolved_base
from rltap.train.trainer import PolicyTrainer

__all__ = [
    "PolicyTokens",
    "PolicyTrainers",
    "active_adapter",
    "adapter_parameters",
    "by_interaction",
    "policy_model",
]

# Which of a pack's tokens a policy trains on: a boolean per token of the pack.
PolicyTokens = Callable[[TreePack, str], np.ndarray]


def policy_model(
    model: Any,
    policies: Policies,
    settings: LoraConfig,
    *,
    base: str,
    checkpoint: Path | None = None,
) -> Any:
    """`model` (the base model, loaded) as a peft model with a trainable adapter per policy,
    named after it: new ones after `settings` at each policy's rank, or `checkpoint`'s
    (`RUN/step-N/`, whose `<policy>/` folders `rltap.train.policy_store.load_policies`
    checks first; a rank other than the policy's is a `LoraMismatch` here too)."""
    peft = require_module("peft", LORA_EXTRA, "rltap train with [policies]")
    names = list(policies)
    if not names:
        raise ConfigError("no policy: policy_model needs at least one")
    if checkpoint is not None:
        folder = Path(checkpoint)
        wrapped = peft.PeftModel.from_pretrained(
            model, str(folder / names[0]), adapter_name=names[0], is_trainable=True
        )
        for name in names[1:]:
            wrapped.load_adapter(str(folder / name), adapter_name=name, is_trainable=True)
        for name, policy in policies.items():
            rank = wrapped.peft_config[name].r
            if rank != policy.lora_rank:
                msg = (
                    f"{folder / name} holds a rank-{rank} adapter; policy {name!r} has "
                    f"lora_rank {policy.lora_rank}: resume with the same rank"
                )
                raise LoraMismatch(msg)
        wrapped.set_adapter(names[0])
        return wrapped
    first, *others = names
    config = adapter_config(policies[first].lora(settings))
    wrapped = peft.get_peft_model(model, config, adapter_name=first)
    for name in others:
        wrapped.add_adapter(name, adapter_config(policies[name].lora(settings)))
    for name in names:
        wrapped.peft_config[name].base_model_name_or_path = resolved_base(base)
    wrapped.set_adapter(first)
    return wrapped


def adapter_parameters(model: Any, name: str) -> list[Any]:
    """The parameters of `model`'s adapter `name` (peft names them `...lora_A.<name>.weight`)."""
    return [p for key, p in model.named_parameters() if adapter_of_tensor(key) == name]


@contextlib.contextmanager
def active_adapter(model: Any, name: str) -> Iterator[None]:
    """`model` with its adapter `name` active (and trainable) alone, the previous one after."""
    previous = model.active_adapter
    model.set_adapter(name)
    for parameter in adapter_parameters(model, name):
        parameter.requires_grad_(True)
    try:
        yield
    finally:
        model.set_adapter(previous)


def by_interaction(policy_of: Mapping[str, str | None]) -> PolicyTokens:
    """`PolicyTokens` from each recorded call's policy (interaction id -> policy name, None or
    absent: the base model's call, trained by none)."""

    def tokens_of(pack: TreePack, policy: str) -> np.ndarray:
        owners = np.array(
            [policy_of.get(interaction) == policy for interaction in pack.interaction_ids] + [False]
        )
        # interaction_index is -1 on tokens of no call (the prompt's root): the last entry.
        mine: np.ndarray = owners[pack.interaction_index]
        return mine

    return tokens_of


class PolicyTrainers:
    """A `PolicyTrainer` per policy on one peft model holding an adapter per policy
    (`policy_model`), stepped together (module docstring).

    Usage:
        model = policy_model(base, config.policies, config.lora, base=config.model)
        trainers = PolicyTrainers(model, config.policies, config.update, config.loop)
        metrics, changed = trainers.step(packs, by_interaction(policy_of_call))
        await PolicySync(engine, run.sync_dir()).push(trainers, changed)
    """

    def __init__(
        self,
        model: Any,
        policies: Policies,
        update: UpdateConfig | None = None,
        loop: LoopConfig | None = None,
        *,
        attention: Attention = "sdpa",
        ranks: Ranks | None = None,
        precision: PrecisionConfig | None = None,
        versions: Mapping[str, int] | None = None,
    ) -> None:
        ranks = ranks or Ranks.current()
        if ranks.sharded:
            msg = "policies train in one process for now: no --nproc-per-node, torchrun or --ray"
            raise ConfigError(msg)
        missing = [name for name in policies if name not in model.peft_config]
        if missing:
            msg = f"the model has no adapter for policies {missing}: build it with policy_model"
            raise ConfigError(msg)
        self.model = model
        self.policies = dict(policies)
        update = update or UpdateConfig()
        self.trainers: dict[str, PolicyTrainer] = {}
        for name, policy in self.policies.items():
            self.trainers[name] = PolicyTrainer(
                model,
                policy.update(update),
                loop,
                attention=attention,
                ranks=ranks,
                precision=precision,
                parameters=adapter_parameters(model, name),
            )
        # The version each policy's adapter is (its tokens carry it): a step trains it into +1.
        self.versions = {name: int((versions or {}).get(name, 0)) for name in self.policies}

    def step(
        self, packs: Sequence[TreePack], tokens_of: PolicyTokens
    ) -> tuple[dict[str, float], list[str]]:
        """Train each policy on its tokens of `packs`; returns the metrics (`<policy>/<key>`)
        and the policies whose adapter changed (the ones that had a token to train on)."""
        metrics: dict[str, float] = {}
        changed = []
        for name, trainer in self.trainers.items():
            parts = [_narrowed(pack, tokens_of(pack, name)) for pack in packs]
            own = [part for part in parts if part is not None]
            if own:
                with active_adapter(self.model, name):
                    stats = trainer.step(own, version=self.versions[name])
            else:
                stats = dict.fromkeys(_METRICS, 0.0)
                stats["tokens"] = 0
            if stats["tokens"] > 0:
                changed.append(name)
            metrics.update({f"{name}/{key}": value for key, value in stats.items()})
        return metrics, changed


# PolicyTrainer.step's metrics, zero for a policy with no token this step.
_METRICS = ("loss", "tokens", "stale_tokens", "clip_fraction", "entropy", "kl", "grad_norm")


def _narrowed(pack: TreePack, mine: np.ndarray) -> TreePack | None:
    """`pack` with its loss mask narrowed to the tokens in `mine`, or None when none is left."""
    mask = np.asarray(mine, dtype=bool)
    if mask.shape != pack.loss_mask.shape:
        msg = f"a policy's token mask has shape {mask.shape}; the pack has {len(pack)} tokens"
        raise ValueError(msg)
    loss_mask = (pack.loss_mask.astype(bool) & mask).astype(pack.loss_mask.dtype)
    if not loss_mask.any():
        return None
    return dataclasses.replace(pack, loss_mask=loss_mask, advantages=pack.advantages.copy())
