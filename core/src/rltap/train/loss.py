"""The policy loss: decoupled PPO's clipped objective on the recorded tokens.

Three policies meet on every generated token:

- the behaviour policy, which sampled it: its logprob is the one recorded at generation time
  (`TreePack.logprobs`);
- the proximal policy, the trainer's weights when the step began: the clipping anchor. With one
  update per step it is the policy being trained itself (its logprobs detached), so it costs
  nothing; with several minibatches per step it is recomputed once, before the first update;
- the policy being trained, whose logprobs carry the gradient.

Per token, with ratio r = exp(logp - proximal) and behaviour weight w = exp(proximal -
behaviour), capped at `behaviour_cap` (a token the behaviour policy sampled with much lower
probability than the trainer now gives it would otherwise dominate the batch):

    loss = -w * min(r * A, clip(r, 1 - clip, 1 + clip) * A) + kl_coef * k3(reference, logp)

where A is the token's advantage and k3 = exp(ref - logp) - (ref - logp) - 1 the unbiased,
always non-negative KL estimator. When behaviour and proximal agree (on-policy, no staleness),
w = 1 and this is PPO's objective; it is decoupled PPO's (Hilton et al., 2022; AReaL's) when
they do not (asynchronous rollouts, stale tokens).

`policy_loss` returns sums over the given tokens, not means: a step's micro-batches are
accumulated and divided by the step's token count once, so the gradient is the same however
the tokens are split into micro-batches and packs (`tests/train/test_loss.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rltap.config.train import UpdateConfig

__all__ = ["LossSums", "k3", "policy_loss"]


@dataclass(slots=True)
class LossSums:
    """Sums over the tokens of one call; `loss` carries the gradient."""

    loss: torch.Tensor
    tokens: int
    clipped: float
    entropy: float
    kl: float


def policy_loss(
    logprobs: torch.Tensor,
    behaviour: torch.Tensor,
    proximal: torch.Tensor,
    advantages: torch.Tensor,
    update: UpdateConfig,
    *,
    entropy: torch.Tensor | None = None,
    reference: torch.Tensor | None = None,
) -> LossSums:
    """The loss summed over the given tokens (all 1-D, one value per token), with the knobs of
    `update` (`rltap train --clip --behaviour-cap --kl-coef`).

    `kl` in the result is KL(trained || reference) when `reference` is given (`--kl-coef` > 0:
    the drift from the initial model), else the same estimate against the behaviour policy.
    The latter, with one update per step (`--algo grpo`, or the first minibatch), compares the
    trainer's logprobs with the engine's for the very same weights: it measures engine/trainer
    mismatch (numerics, a stale token's older weights), not learning."""

    ratio = torch.exp(logprobs - proximal)
    low, high = 1.0 - update.clip, 1.0 + update.clip
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(low, high) * advantages)
    weight = torch.exp(proximal - behaviour).clamp(max=update.behaviour_cap)
    loss = -(weight.detach() * surrogate)
    anchor = behaviour if reference is None else reference
    kl = k3(anchor, logprobs)
    if reference is not None and update.kl_coef:
        loss = loss + update.kl_coef * kl
    clipped = ((ratio < low) & (advantages < 0)) | ((ratio > high) & (advantages > 0))
    return LossSums(
        loss=loss.sum(),
        tokens=len(logprobs),
        clipped=float(clipped.sum()),
        entropy=float(entropy.detach().sum()) if entropy is not None else 0.0,
        kl=float(kl.detach().sum()),
    )


def k3(anchor: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimate of KL(policy || anchor) per token, from the policy's own samples:
    exp(d) - d - 1 with d = anchor - logprobs, which is >= 0 for every d.

    Computed as expm1(d) - d in float64 (then in the inputs' dtype): in fp32, exp(d) - d - 1
    cancels to a few 1e-8 below zero for the tiny d of nearly equal policies."""
    log_ratio = anchor.double() - logprobs.double()
    return (torch.expm1(log_ratio) - log_ratio).clamp(min=0.0).to(logprobs.dtype)
