"""Tree packs to test a packed forward pass with: recorded calls built from token lists, and the
three shapes issue 17 names (a chain, an n=4 branching, a mixed forest), and the reference a
packed forward must equal: a plain causal forward over each leaf's sequence alone.

Token ids stay below 1000, so the packs run on any model with a real vocabulary (SmolLM2's
49,152, Qwen's 151,936). The recorded logprobs are placeholders (-1.0): these packs test what a
forward computes, not what an engine recorded.

Usage:
    first = recorded_call([1, 2, 3], [10, 11])
    second = recorded_call([4], [12], parent=first)  # prompt: first's sequence, then [4]
    pack = pack_calls([first, second])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rltap.record.pack import TreePack, pack_interactions
from rltap.record.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    ModelResponse,
)

__all__ = [
    "SAMPLE_PACKS",
    "branching_pack",
    "chain_pack",
    "mixed_pack",
    "pack_calls",
    "plain_leaf_logprobs",
    "recorded_call",
]


def recorded_call(
    new: Sequence[int],
    output: Sequence[int],
    parent: InteractionWithTokenLogpReward | None = None,
    link: Link = Link.PREFIX,
) -> InteractionWithTokenLogpReward:
    """A complete call generating `output`: along a `prefix` link its prompt is the parent's
    whole sequence followed by `new`; along any other link (or without a parent), `new` alone."""
    above = parent.model_response if parent is not None and link is Link.PREFIX else None
    history = [] if above is None else above.input_tokens + above.output_tokens
    response = ModelResponse(
        input_tokens=history + list(new),
        output_tokens=list(output),
        output_logprobs=[-1.0] * len(output),
        output_versions=[0] * len(output),
    )
    return InteractionWithTokenLogpReward(
        model_response=response,
        parent=parent,
        link=link if parent is not None else Link.ROOT,
        status=InteractionStatus.COMPLETE,
    )


def pack_calls(calls: Sequence[InteractionWithTokenLogpReward]) -> TreePack:
    """`calls` packed with reward 1.0 each."""
    return pack_interactions(calls, dict.fromkeys((c.interaction_id for c in calls), 1.0))


def chain_pack() -> TreePack:
    """Three turns, each continuing the one before."""
    first = recorded_call([1, 8, 9, 10], [20, 21, 22])
    second = recorded_call([11, 12], [23, 24], first)
    return pack_calls([first, second, recorded_call([13], [25, 26, 27, 28], second)])


def branching_pack() -> TreePack:
    """n=4 samples of one prompt."""
    prompt = [1, 30, 31, 32, 33, 34]
    return pack_calls([recorded_call(prompt, [40 + k, 41, 42 + k]) for k in range(4)])


def mixed_pack() -> TreePack:
    """Two samples of a prompt, the first continued by two turns (one continued again), a
    rewrite of it sharing part of the prompt, and a second root: a forest."""
    prompt = [1, 50, 51, 52]
    a, b = recorded_call(prompt, [60, 61]), recorded_call(prompt, [62])
    c, d = recorded_call([53, 54], [63, 64], a), recorded_call([55], [65], a)
    rewrite = recorded_call([1, 50, 57], [66, 67], a, link=Link.REWRITE)
    e = recorded_call([53], [68, 69], c)
    return pack_calls([a, b, c, d, rewrite, recorded_call([7, 8], [9]), e])


SAMPLE_PACKS: dict[str, Callable[[], TreePack]] = {
    "chain": chain_pack,
    "n4-branching": branching_pack,
    "mixed": mixed_pack,
}


def plain_leaf_logprobs(
    model: Any, pack: TreePack, *, temperature: float = 1.0
) -> list[np.ndarray]:
    """Per leaf of `pack` (in `pack.leaves` order), the logprobs along its sequence from a plain
    causal forward of the Hugging Face `model` over that sequence alone: `log_softmax(logits /
    T)` of each token given the ones before it, 0.0 at the first (the packed forward's
    convention for a root); float32, or float64 for a float64 model."""
    import torch

    device = next(model.parameters()).device
    found = []
    with torch.no_grad():
        for leaf in pack.leaves:
            ids = torch.as_tensor(pack.leaf_sequence(leaf), dtype=torch.long, device=device)
            logits = model(input_ids=ids[None]).logits[0, :-1]
            logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
            logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[1:, None])[:, 0].cpu().numpy()
            found.append(np.concatenate([np.zeros(1, dtype=logp.dtype), logp]))
    return found
