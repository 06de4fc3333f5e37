"""Training on rltap's data: tree-packed trajectories (`rltap.train.pack`)."""

from __future__ import annotations

from rltap.train.pack import PackLeaf, TreePack, pack_interactions

__all__ = ["PackLeaf", "TreePack", "pack_interactions"]
