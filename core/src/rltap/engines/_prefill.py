"""Prefilling the requests admitted in one decode step: as few forwards as the budgets allow.

Requests with the same prompt (a GRPO group) share one row: it is computed once and each of
them joins the batch with a copy of its cache. Distinct prompts are grouped shortest first (so
a group pads little), at most `max_rows` to a group and at most `max_tokens` tokens in its
padded [rows, width] input, which bounds the activations of one forward; a prompt longer than
`max_tokens` is prefilled alone. A group is one left-padded forward: the attention mask hides
the padding and position ids count each row's own tokens from 0, so every row caches what it
would cache alone, up to float summation order. A group of one row has no padding and passes
no mask: exactly the alone prefill.

With several LoRA adapters (`_adapters`), each prompt is prefilled with its request's adapter:
requests share a row only when prompt and adapter are the same, and a group's forward hands
each row its adapter (peft's mixed batch), so rows of different adapters prefill together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rltap.engines._adapters import AdapterRouter
from rltap.engines._batcher import KVBatch
from rltap.engines._slots import Slot

__all__ = ["PrefillGroup", "admit", "check_sizes", "plan_prefill", "prefill"]


def check_sizes(**sizes: int) -> None:
    """Refuse a batch size or prefill budget below 1 (ValueError naming it)."""
    for name, value in sizes.items():
        if value < 1:
            msg = f"{name} must be >= 1, got {value}"
            raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class PrefillGroup:
    """One prefill forward: its distinct `prompts`, and for each request in it (`members`,
    indices into what was planned) the row of `prompts` it takes (`source`); `adapters`, when
    planned with adapters, the adapter of each row of `prompts`."""

    prompts: list[tuple[int, ...]]
    members: list[int]
    source: list[int]
    adapters: list[str] | None = None


def plan_prefill(
    prompts: Sequence[Sequence[int]],
    max_rows: int,
    max_tokens: int,
    adapters: Sequence[str] | None = None,
) -> list[PrefillGroup]:
    """The prefill forwards of requests admitted together, whose prompts are `prompts` (and
    whose adapters are `adapters`, when they may differ).

    Requests with the same prompt (and adapter) share one row; empty prompts (nothing to
    cache) form a group of their own, which needs no forward. With `max_rows == 1` every
    request is prefilled alone, none shared: the reference the batched path is tested against.
    """
    # A row of the forward per distinct key: the prompt (and adapter), or the request alone.
    tags = [None] * len(prompts) if adapters is None else list(adapters)
    keys: list[Any] = (
        [(tag, tuple(p)) for tag, p in zip(tags, prompts, strict=True)]
        if max_rows > 1
        else list(range(len(prompts)))
    )
    prompt_of = {key: tuple(p) for key, p in zip(keys, prompts, strict=True)}
    adapter_of = dict(zip(keys, tags, strict=True))
    distinct = sorted(dict.fromkeys(keys), key=lambda key: len(prompt_of[key]))
    chunks: list[list[Any]] = []
    current: list[Any] = []
    for key in distinct:
        width = len(prompt_of[key])  # sorted ascending: the widest of `current` and `key`
        if current and (
            len(current) == max_rows
            or (len(current) + 1) * width > max_tokens
            or not prompt_of[current[-1]]  # the empty ones need no forward: on their own
        ):
            chunks.append(current)
            current = []
        current.append(key)
    if current:
        chunks.append(current)
    groups = []
    for chunk in chunks:
        row = {key: n for n, key in enumerate(chunk)}
        members = [i for i, key in enumerate(keys) if key in row]
        source = [row[keys[i]] for i in members]
        rows = [adapter_of[key] for key in chunk] if adapters is not None else None
        groups.append(PrefillGroup([prompt_of[key] for key in chunk], members, source, rows))
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


def admit(
    batch: KVBatch[Slot],
    model: Any,
    slots: Sequence[Slot],
    cache_kwarg: str,
    rows: int,
    max_tokens: int,
    router: AdapterRouter | None = None,
) -> None:
    """Prefill each slot's context but its last token (fed by the next decode step) and join
    `batch`, one group of prompts (`plan_prefill`) per prefill forward, each row with its
    request's adapter (`router`: None, the model's plain forward)."""
    from transformers import DynamicCache

    contexts = [slot.context_ids for slot in slots]
    adapters = None if router is None else router.rows_for([s.request.policy for s in slots])
    plan = plan_prefill([context[:-1] for context in contexts], rows, max_tokens, adapters)
    for group in plan:
        with contextlib.nullcontext() if router is None else router.route(group.adapters):
            cache, mask = prefill(
                model, group.prompts, DynamicCache(config=model.config), cache_kwarg
            )
        batch.add(
            [slots[i] for i in group.members],
            cache,
            mask,
            [contexts[i][-1] for i in group.members],
            source=group.source,
        )
