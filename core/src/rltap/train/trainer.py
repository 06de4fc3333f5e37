"""One policy update from a step's tree packs: advantages, micro-batches, the loss, AdamW.

`PolicyTrainer(model, update, loop, precision=...)` takes `rltap train`'s own sections
(`UpdateConfig`: the optimizer, the objective, the minibatches; `LoopConfig`: --max-staleness;
`PrecisionConfig`: --dtype, --gradient-checkpointing, --cpu-offload).
`PolicyTrainer.step(packs, version)`:

1. advantages into each pack (`rltap.train.advantages`; per group for grpo, over the step for
   ppo);
2. the packs are dealt round-robin into `--minibatches` groups, one optimizer step each (PPO's
   several updates on one batch); each group's packs are cut at branch points where they
   exceed the micro-batch budget (`rltap.train.batches.split_pack`), the pieces dealt to the
   trainer ranks by token count (`rltap.train.distributed.Ranks.deal`; all of them at world
   size 1), and each rank's share packed into token-budget micro-batches
   (`rltap.train.batches.micro_batches`, first-fit decreasing); every rank runs as many
   micro-batches as the rank with the most (filler ones add nothing: FSDP2's gathers are
   collectives);
3. with more than one minibatch, the proximal logprobs (the weights at the start of the step)
   are computed for every micro-batch first, without gradients; with one, the policy being
   trained is the proximal one (`rltap.train.loss`);
4. per micro-batch: one packed forward (`packed_token_stats` through the trainer's
   `TokenScorer`: logprob and entropy at the trainable tokens only, the output layer a chunk
   of rows at a time), `policy_loss`, backward of its sum divided by the group's token
   count over all ranks (gradient accumulation: the same gradient as one forward over the
   whole group in one process; FSDP2 sums the ranks' gradients); then gradient clipping and
   the AdamW step. The metrics are summed over the ranks.

At world size > 1 (a process group, `rltap.train.distributed`) the model's `TokenScorer` is
sharded with FSDP2 when the trainer is built, and so is a KL reference model's.

Precision and memory (`PrecisionConfig`):

- `dtype="bfloat16"`: bf16 compute, fp32 master weights, gradients and AdamW state. At world
  size > 1 that is FSDP2's mixed precision (`shard_model`): the gathered parameters are bf16
  and every op of the forward and backward runs in bf16, the gradients are reduced in fp32;
  the KL reference model, sharded the same way, computes as the policy does. At world size
  1 there is no FSDP2 to cast the parameters: each forward (policy, proximal, reference) runs
  under `torch.autocast(bf16)` over the fp32 model, which runs the matmuls in bf16 and keeps
  the norms, softmaxes and residual sums in fp32 (a little closer to fp32 than FSDP2's bf16;
  tests/train/test_precision.py measures both). The logprobs' log_softmax is fp32 either way.
- `gradient_checkpointing`: transformers' activation checkpointing of every decoder layer
  (non-reentrant `torch.utils.checkpoint`: the same loss and gradients, each layer's
  activations recomputed in the backward instead of kept).
- `cpu_offload`: FSDP2's `CPUOffloadPolicy` (world size > 1 only: without a process group
  there is no sharding to offload; refused with a `ConfigError`).

The trainer only trains; pushing the weights to the engine and bumping the version is the
loop's (`rltap.train.loop`).

A LoRA model (a peft model, `rltap.train.lora`) trains the same way: AdamW and the gradient
clipping see only the parameters that require gradients (the adapter's), and the KL
reference, when no reference model is given, is the model itself with its adapter disabled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rltap.config.flags import ConfigError
from rltap.config.train import LoopConfig, PrecisionConfig, UpdateConfig
from rltap.engines.lora import is_peft_model
from rltap.record.pack import TreePack
from rltap.train.advantages import assign_advantages, trainable_tokens
from rltap.train.batches import micro_batches, split_pack
from rltap.train.distributed import Ranks, shard_model
from rltap.train.forward import Attention, TokenScorer, packed_token_stats
from rltap.train.lora import trainable
from rltap.train.loss import LossSums, policy_loss

__all__ = ["PolicyTrainer"]


@dataclass(slots=True)
class _Work:
    """A micro-batch and its trainable tokens, with their fixed per-token inputs; a `filler`
    one only keeps this rank's forwards in step with the other ranks' (its loss counts 0)."""

    pack: TreePack
    tokens: np.ndarray
    behaviour: torch.Tensor
    advantages: torch.Tensor
    proximal: torch.Tensor | None = None
    reference: torch.Tensor | None = None
    filler: bool = False


class PolicyTrainer:
    """AdamW on a Hugging Face causal LM (or a peft LoRA model of one), one `step` per batch of
    tree packs; only the parameters that require gradients train.

    `update` and `loop` are `rltap train`'s sections (their defaults when None). `reference`
    (a frozen copy of the initial model) is needed for a KL penalty (`update.kl_coef > 0`),
    except for a LoRA model: its base model is the reference. `attention` is the packed
    forward's kernel (`rltap.train.forward`). `ranks` (default: the process group's, if any)
    are the trainer ranks the steps are shared by: every rank builds its trainer on the same
    model and steps on the same packs; with more than one, the model is sharded (FSDP2).
    `precision` is `rltap train`'s --dtype, --gradient-checkpointing and --cpu-offload (the
    module docstring says how each applies); the model is loaded in fp32 either way.
    `parameters` are the ones AdamW and the gradient clipping take (default: every parameter
    that requires gradients; one policy's adapter of several, `rltap.train.policies`).

    `model` stays the Hugging Face (or peft) model, its parameters sharded in place at world
    size > 1 (`rltap.train.gather` gathers them); `scorer` is the module every forward of the
    trainer runs (FSDP2's root).

    Usage:
        trainer = PolicyTrainer(model, UpdateConfig(lr=1e-3, algo="ppo"))
        metrics = trainer.step(packs, version=0)
    """

    def __init__(
        self,
        model: Any,
        update: UpdateConfig | None = None,
        loop: LoopConfig | None = None,
        *,
        reference: Any | None = None,
        attention: Attention = "sdpa",
        ranks: Ranks | None = None,
        precision: PrecisionConfig | None = None,
        parameters: Sequence[Any] | None = None,
    ) -> None:
        self.update = update = update or UpdateConfig()
        self.max_staleness = (loop or LoopConfig()).max_staleness
        self.lora = is_peft_model(model)
        if update.kl_coef > 0 and reference is None and not self.lora:
            msg = "a KL penalty (kl_coef > 0) needs the reference model"
            raise ValueError(msg)
        self.ranks = ranks or Ranks.current()
        self.precision = precision = precision or PrecisionConfig()
        if precision.cpu_offload and not self.ranks.sharded:
            msg = (
                "--cpu-offload offloads the sharded parameters (FSDP2): it needs more than one "
                "trainer rank (--nproc-per-node 2 or more, or torchrun)"
            )
            raise ConfigError(msg)
        if precision.gradient_checkpointing:
            _enable_checkpointing(model, lora=self.lora)
        bf16 = precision.dtype == "bfloat16"
        self.model: Any = model
        self.scorer = shard_model(TokenScorer(model), self.ranks, precision)
        # The KL reference is sharded as the policy is (its gathers, and with bf16 its cast):
        # frozen, it has no gradient or optimizer state, but whole it would cost each rank a copy.
        self.reference = None
        if reference is not None:
            self.reference = shard_model(TokenScorer(reference), self.ranks, precision)
        # FSDP2 casts the parameters of a sharded model; a single process autocasts instead
        self.autocast = bf16 and not self.ranks.sharded
        self.attention: Attention = attention
        self.parameters = trainable(model) if parameters is None else list(parameters)
        self.optimizer = torch.optim.AdamW(
            self.parameters, lr=update.lr, weight_decay=update.weight_decay
        )

    def step(self, packs: Sequence[TreePack], version: int) -> dict[str, float]:
        """Train on `packs` as the policy of `version`; returns the step's metrics (over all
        ranks: every rank passes the same packs and gets the same metrics)."""
        update = self.update
        assign_advantages(packs, update.normalisation)
        n = update.updates_per_step
        groups = [list(packs[i::n]) for i in range(min(n, len(packs)))]
        plans = [self._plan(group, version) for group in groups]
        counts = self.ranks.all_max([len(work) for work, _ in plans])
        for (work, _), group, count in zip(plans, groups, counts, strict=True):
            work.extend(_filler(group, version) for _ in range(count - len(work)))
        totals = self.ranks.all_sum(
            [sum(len(w.tokens) for w in work if not w.filler) for work, _ in plans]
        )
        if self.reference is not None or (self.lora and update.kl_coef > 0):
            for work, _ in plans:
                for w in work:
                    w.reference = self._reference_logprobs(w)
        if n > 1:
            self._fill_proximal([w for work, _ in plans for w in work])
        sums = LossSums(torch.zeros(()), 0, 0.0, 0.0, 0.0)
        norms = []
        self.model.train()
        for (work, _), tokens in zip(plans, totals, strict=True):
            if tokens == 0:
                continue
            self.optimizer.zero_grad(set_to_none=True)
            for w in work:
                loss = self._loss(w)
                if w.filler:  # the collectives of a forward and a backward, no gradient
                    torch.autograd.backward(loss.loss * 0.0)
                    continue
                torch.autograd.backward(loss.loss / tokens)
                _accumulate(sums, loss)
            norm = torch.nn.utils.clip_grad_norm_(self.parameters, update.max_grad_norm)
            norms.append(_value(norm))
            self.optimizer.step()
        self.model.eval()
        stale = sum(left_out for _, left_out in plans)
        return _metrics(sums, stale, norms, self.ranks)

    def _plan(self, packs: list[TreePack], version: int) -> tuple[list[_Work], int]:
        """This rank's micro-batches of a group, and the stale tokens they leave out."""
        budget = self.update.micro_batch_tokens
        pieces = [piece for pack in packs for piece in split_pack(pack, budget)]
        work, stale = [], 0
        for pack in micro_batches(self.ranks.deal(pieces), budget):
            tokens, left_out = trainable_tokens(pack, version, self.max_staleness)
            stale += left_out
            if len(tokens):
                work.append(_work(pack, tokens))
        return work, stale

    def _reference_logprobs(self, w: _Work) -> torch.Tensor:
        if self.reference is not None:
            return self._logprobs(self.reference, w)
        with self.model.disable_adapter():  # a LoRA model's base model: the initial weights
            return self._logprobs(self.scorer, w)

    def _fill_proximal(self, work: list[_Work]) -> None:
        self.model.eval()
        for w in work:
            w.proximal = self._logprobs(self.scorer, w)

    def _logprobs(self, scorer: TokenScorer, w: _Work) -> torch.Tensor:
        with torch.no_grad():
            logp, _ = self._stats(scorer, w)
        return logp

    def _stats(self, scorer: TokenScorer, w: _Work) -> tuple[torch.Tensor, torch.Tensor]:
        # the backward runs outside: autocast's own advice, its ops keep their forward's dtype
        compute = (
            torch.autocast(scorer.device.type, dtype=torch.bfloat16)
            if self.autocast
            else contextlib.nullcontext()
        )
        with compute:
            return packed_token_stats(
                scorer,
                w.pack,
                w.tokens,
                attention=self.attention,
                temperature=self.update.temperature,
            )

    def _loss(self, w: _Work) -> LossSums:
        logp, entropy = self._stats(self.scorer, w)
        device = logp.device
        proximal = logp.detach() if w.proximal is None else w.proximal
        return policy_loss(
            logp,
            w.behaviour.to(device),
            proximal,
            w.advantages.to(device),
            self.update,
            entropy=entropy,
            reference=w.reference,
        )


def _enable_checkpointing(model: Any, *, lora: bool) -> None:
    """Activation checkpointing of every decoder layer of `model` (a peft model's base model),
    non-reentrant: it needs no input that requires grad (a LoRA model's embeddings have none)
    and composes with FSDP2's hooks."""
    base = model.get_base_model() if lora else model
    kwargs = {"use_reentrant": False}
    # transformers 5 renamed it; 4.x (>= 4.56, the range rltap takes) has the old name only
    enable = getattr(base, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _work(pack: TreePack, tokens: np.ndarray, *, filler: bool = False) -> _Work:
    return _Work(
        pack,
        tokens,
        torch.as_tensor(pack.logprobs[tokens], dtype=torch.float32),
        torch.as_tensor(pack.advantages[tokens], dtype=torch.float32),
        filler=filler,
    )


def _filler(packs: list[TreePack], version: int) -> _Work:
    """A micro-batch for a rank that has fewer than another: the group's shortest pack, its
    first token with a parent (any rank can build it, every rank holds all packs)."""
    for pack in sorted(packs, key=len):
        with_parent = np.flatnonzero(pack.parent_index >= 0)
        if len(with_parent):
            return _work(pack, with_parent[:1], filler=True)
    msg = f"no pack of the step (version {version}) has a token to train on"
    raise ValueError(msg)


def _value(norm: torch.Tensor) -> float:
    """A gradient norm as a float (a DTensor's, under FSDP2, in full)."""
    full = getattr(norm, "full_tensor", None)
    return float(full() if full is not None else norm)


def _accumulate(totals: LossSums, sums: LossSums) -> None:
    totals.loss = totals.loss + sums.loss.detach().cpu()
    totals.tokens += sums.tokens
    totals.clipped += sums.clipped
    totals.entropy += sums.entropy
    totals.kl += sums.kl


def _metrics(totals: LossSums, stale: int, norms: list[float], ranks: Ranks) -> dict[str, float]:
    loss, tokens, clipped, entropy, kl, stale_tokens = ranks.all_sum(
        [float(totals.loss), totals.tokens, totals.clipped, totals.entropy, totals.kl, stale]
    )
    n = max(1.0, tokens)
    return {
        "loss": loss / n,
        "tokens": tokens,
        "stale_tokens": stale_tokens,
        "clip_fraction": clipped / n,
        "entropy": entropy / n,
        "kl": kl / n,
        "grad_norm": max(norms, default=0.0),
    }
