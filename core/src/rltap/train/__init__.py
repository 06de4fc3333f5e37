"""Training on rltap's data: tree-packed trajectories (`rltap.train.pack`)."""

from __future__ import annotations

from rltap.train.batches import micro_batches, split_pack
from rltap.train.layouts import VERL_KEYS, leaf_values, verl_batch
from rltap.train.pack import PackLeaf, TreePack, pack_interactions

__all__ = [
    "VERL_KEYS",
    "PackLeaf",
    "TreePack",
    "leaf_values",
    "micro_batches",
    "pack_interactions",
    "split_pack",
    "verl_batch",
]
