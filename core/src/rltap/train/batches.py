"""Micro-batches: many `TreePack`s into token-budget micro-batches for the packed forward pass.

`micro_batches(packs, token_budget, max_pack_tokens=...)` first splits every pack longer than
`max_pack_tokens` (default: the budget), then places the pieces first-fit decreasing into
micro-batches of at most `token_budget` tokens. A micro-batch is itself one `TreePack`: a forest
whose roots are its pieces' roots (`rltap.record.pack_io.concat_packs`), so one packed forward
(`rltap.train.forward.packed_logprobs`) computes every piece at once and no piece sees another.

Splitting keeps every token's full context. A pack is cut at a branch point: the subtree under
one child of a token with two or more children (or one of several roots) moves to a pack of its
own, which starts with its ancestors' path again, copied as prompt context (loss 0, logprob 0.0,
version -1, no interaction, reward 0). So a moved token sees, at the same positions, exactly the
tokens it saw before, and its logprob is the same; every generated token keeps loss 1 in exactly
one piece (the copies of ancestors are context only); the leaves below the cut move with it.
The cut taken is the largest subtree that fits the bound together with its context (fewest
repeated tokens); where none fits, the largest one, which is split again. Nothing is dropped.

A single chain (no branch point) longer than the bound cannot be cut without a token losing
part of its context, so it raises `ContextLengthExceeded` naming the bound: raise the budget, or
truncate the episode where it is collected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rltap.record.errors import ContextLengthExceeded
from rltap.record.pack import PackLeaf, TreePack
from rltap.record.pack_io import PACK_ARRAYS, concat_packs

__all__ = ["micro_batches", "split_pack"]


def micro_batches(
    packs: Sequence[TreePack], token_budget: int, *, max_pack_tokens: int | None = None
) -> list[TreePack]:
    """`packs` as micro-batches of at most `token_budget` tokens each, first-fit decreasing;
    a pack longer than `max_pack_tokens` (at most the budget; default the budget) is split at
    branch points first (see the module)."""
    bound = token_budget if max_pack_tokens is None else max_pack_tokens
    if not 0 < bound <= token_budget:
        msg = f"max_pack_tokens must be in [1, token_budget={token_budget}], got {bound}"
        raise ValueError(msg)
    pieces = [piece for pack in packs for piece in split_pack(pack, bound)]
    pieces.sort(key=len, reverse=True)  # stable: equal lengths keep their input order
    bins: list[list[TreePack]] = []
    room: list[int] = []
    for piece in pieces:
        for index, free in enumerate(room):
            if len(piece) <= free:
                bins[index].append(piece)
                room[index] -= len(piece)
                break
        else:
            bins.append([piece])
            room.append(token_budget - len(piece))
    return [concat_packs(members)[0] for members in bins]


def split_pack(pack: TreePack, max_tokens: int) -> list[TreePack]:
    """`pack` cut at branch points into packs of at most `max_tokens` tokens, each cut subtree
    preceded by its ancestors as context (see the module); `[pack]` when it fits."""
    done: list[TreePack] = []
    todo = [pack]
    while todo:
        current = todo.pop()
        if len(current) <= max_tokens:
            done.append(current)
            continue
        cut = _best_cut(current, max_tokens)
        if cut is None:
            msg = (
                f"a chain of {len(current)} tokens has no branch point to split at and exceeds "
                f"the micro-batch bound of {max_tokens} tokens; raise the token budget"
            )
            raise ContextLengthExceeded(msg)
        start, end = cut, int(current.subtree_end[cut])
        context = current.path_to(cut)[:-1]  # its ancestors: the piece's prompt again
        everything = np.arange(len(current))
        rest = everything[(everything < start) | (everything >= end)]
        # The remainder comes out first, then the moved subtree, each split further if needed.
        todo.append(_subset(current, np.concatenate([context, everything[start:end]]), context))
        todo.append(_subset(current, rest, context[:0]))
    return done


def _best_cut(pack: TreePack, max_tokens: int) -> int | None:
    """The root token of the subtree to move out: a child of a branch point, the largest whose
    piece (context + subtree) fits, else the largest; None on a single chain."""
    parents = pack.parent_index
    children = np.bincount(parents[parents >= 0], minlength=len(pack))
    roots = int(np.count_nonzero(parents < 0))
    branch_children = np.flatnonzero(
        np.where(parents >= 0, children[np.maximum(parents, 0)] > 1, roots > 1)
    )
    if len(branch_children) == 0:
        return None
    sizes = pack.subtree_end[branch_children] - branch_children
    pieces = sizes + pack.position_ids[branch_children]  # context: one token per level above
    fits = pieces <= max_tokens
    # Each side of any such cut is shorter than the pack (the subtree has a sibling, the moved
    # piece lacks it), so splitting again ends.
    candidates = np.flatnonzero(fits) if fits.any() else np.arange(len(branch_children))
    best = candidates[np.argmax(sizes[candidates])]
    return int(branch_children[best])


def _subset(pack: TreePack, kept: np.ndarray, context: np.ndarray) -> TreePack:
    """The pack of the tokens `kept` (ancestor-closed, in depth-first order); the tokens in
    `context` become prompt tokens. Interactions with no token left are dropped from the ids."""
    new_index = np.full(len(pack), -1, dtype=np.int64)
    new_index[kept] = np.arange(len(kept))
    arrays = {name: getattr(pack, name)[kept].copy() for name in PACK_ARRAYS}
    old_parent = pack.parent_index[kept]
    arrays["parent_index"] = np.where(old_parent < 0, -1, new_index[old_parent]).astype(np.int32)
    # Descendants of a kept token that are kept lie right after it, before its old subtree end.
    arrays["subtree_end"] = np.searchsorted(kept, pack.subtree_end[kept]).astype(np.int32)
    was_context = np.zeros(len(pack), dtype=np.bool_)
    was_context[context] = True
    is_context = was_context[kept]
    for name, blank in (("loss_mask", 0), ("logprobs", 0.0), ("versions", -1), ("rewards", 0.0)):
        arrays[name][is_context] = blank
    arrays["interaction_index"][is_context] = -1
    leaves = [leaf for leaf in pack.leaves if new_index[leaf.path[-1]] >= 0]
    leaves = [leaf for leaf in leaves if not was_context[leaf.path[-1]]]
    # A leaf's interaction stays named even where it generated no token.
    of_leaves = [pack.interaction_ids.index(leaf.interaction_id) for leaf in leaves]
    used = np.union1d(arrays["interaction_index"][arrays["interaction_index"] >= 0], of_leaves)
    used = used.astype(np.int64)
    renumber = np.full(len(pack.interaction_ids) + 1, -1, dtype=np.int32)
    renumber[used] = np.arange(len(used))
    arrays["interaction_index"] = renumber[arrays["interaction_index"]]  # -1 reads the last: -1
    moved = [
        PackLeaf(leaf.interaction_id, leaf.reward, new_index[leaf.path].astype(np.int32))
        for leaf in leaves
    ]
    ids = [pack.interaction_ids[i] for i in used]
    policies = pack.interaction_policies
    if policies is not None:
        policies = [policies[i] for i in used]
    return TreePack(**arrays, interaction_ids=ids, leaves=moved, interaction_policies=policies)
