"""Prefilling the requests admitted in one decode step: as few forwards as the budgets allow.

Prompts are grouped shortest first (so a group pads little), at most `max_rows` to a group and
at most `max_tokens` tokens in its padded [rows, width] input, which bounds the activations of
one forward; a prompt longer than `max_tokens` is prefilled alone. A group is one left-padded
forward: the attention mask hides the padding and position ids count each row's own tokens from
0, so every row caches what it would cache alone, up to float summation order. A group of one
row has no padding and passes no mask: exactly the alone prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["prefill", "prefill_groups"]


def prefill_groups(lengths: Sequence[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """Indices into `lengths`, one list per prefill forward.

    Empty prompts (nothing to cache) form a group of their own, which needs no forward.
    """
    empty = [i for i, n in enumerate(lengths) if n == 0]
    groups: list[list[int]] = [empty] if empty else []
    current: list[int] = []
    for i in sorted((i for i, n in enumerate(lengths) if n > 0), key=lengths.__getitem__):
        # Sorted ascending: this prompt is the group's widest, so it sets the padded width.
        if current and (len(current) == max_rows or (len(current) + 1) * lengths[i] > max_tokens):
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def prefill(
    model: Any, prompts: Sequence[Sequence[int]], cache: Any, cache_kwarg: str
) -> tuple[Any, torch.Tensor]:
    """Run `prompts` left-padded through `model` into the empty `cache`; return the cache (None
    when every prompt is empty) and the padding mask [rows, width], 1 on each row's tokens.

    The cache holds whatever the model computed at padded positions: the mask must hide them.
    """
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    mask = torch.tensor(
        [[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long, device=device
    )
    if width == 0:
        return None, mask
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], device=device)
    padded = bool((mask == 0).any())
    model(
        input_ids=ids,
        # Padding sits at position 0: any position works, its keys are never attended to.
        position_ids=(mask.cumsum(dim=1) - 1).clamp(min=0),
        use_cache=True,
        logits_to_keep=1,  # the logits are not needed; keep the lm_head cost to one row
        **({"attention_mask": mask} if padded else {}),
        **{cache_kwarg: cache},
    )
    return cache, mask
