"""Advantages per generated token, and which tokens are too stale to train on.

A pack's `rewards[i]` is the reward of the interaction that generated token i, already
discounted along the conversation tree when the pack was exported (`rltap.tree.rewards`: a turn's
reward includes its descendants', by link kind). Each generated segment (one interaction's
output) gets one advantage, written into the pack's `advantages` slot for all its tokens:

- `"group"` (GRPO's, the default): `(r - mean) / (std + 1e-6)` over the interactions of the
  pack, which `rltap rollout --style tree` builds per dataset row (the row's `group_size`
  episodes): each answer is judged against the other answers to the same prompt. Only the
  interactions the pack's loss mask covers count: with policies (`rltap.train.policies`) each
  policy's trainer narrows it to its own calls, so a tutor's answers are judged against the
  tutor's, not against a student's rewards of another scale (per-agent rewards). A group whose
  rewards are all equal gets zeros: it carries no signal about which answer was better.
- `"batch"`: the same over every interaction of the step (whitened returns, for `--algo ppo`).
- `"none"`: the discounted reward itself.

Staleness: a token generated with policy version v is `version - v` updates old when the
trainer is at `version`; tokens more than `max_staleness` old are left out of the loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from rltap.record.pack import TreePack

__all__ = ["Normalisation", "assign_advantages", "trainable_tokens"]

Normalisation = Literal["group", "batch", "none"]
_EPS = 1e-6


def assign_advantages(packs: Sequence[TreePack], normalisation: Normalisation = "group") -> None:
    """Fill each pack's `advantages` (0 on prompt tokens), in place."""
    if normalisation not in ("group", "batch", "none"):
        msg = f"normalisation must be 'group', 'batch' or 'none', got {normalisation!r}"
        raise ValueError(msg)
    segment_rewards = [_segment_rewards(pack) for pack in packs]
    if normalisation == "batch":
        everything = np.concatenate([r for r in segment_rewards if len(r)] or [np.zeros(0)])
        scales = [(float(everything.mean()), float(everything.std()))] * len(packs)
    elif normalisation == "group":
        scales = [
            (float(r.mean()), float(r.std())) if len(r) else (0.0, 0.0) for r in segment_rewards
        ]
    else:
        scales = [(0.0, 1.0 - _EPS)] * len(packs)
    for pack, _rewards, (mean, std) in zip(packs, segment_rewards, scales, strict=True):
        generated = pack.interaction_index >= 0
        pack.advantages = np.zeros(len(pack), dtype=np.float32)
        pack.advantages[generated] = (pack.rewards[generated] - mean) / (std + _EPS)


def trainable_tokens(pack: TreePack, version: int, max_staleness: int) -> tuple[np.ndarray, int]:
    """The indices of `pack`'s tokens the loss covers (generated, at most `max_staleness`
    versions old), and how many generated tokens were left out as stale."""
    generated = pack.loss_mask.astype(bool)
    fresh = pack.versions >= version - max_staleness
    kept = np.flatnonzero(generated & fresh)
    return kept, int(generated.sum()) - len(kept)


def _segment_rewards(pack: TreePack) -> np.ndarray:
    """One reward per trained segment of the pack (an interaction with tokens in its loss
    mask: every generated one, unless a policy's trainer narrowed the mask to its own)."""
    trained: np.ndarray = (pack.interaction_index >= 0) & pack.loss_mask.astype(bool)
    _, first = np.unique(pack.interaction_index[trained], return_index=True)
    rewards: np.ndarray = pack.rewards[trained][first].astype(np.float64)
    return rewards
