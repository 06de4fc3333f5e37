"""Training on rltap's data: tree-packed trajectories (`rltap.record.pack`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rltap._lazy import lazy_getattr
from rltap.record.pack import PackLeaf, TreePack, merge_tries, pack_interactions
from rltap.record.pack_io import decode_pack, encode_pack, load_packs, save_packs
from rltap.train.batches import micro_batches, split_pack
from rltap.train.forward import Attention, packed_logprobs
from rltap.train.layouts import VERL_KEYS, leaf_values, verl_batch
from rltap.train.run_dir import METRICS, REWARD_PLOT, TENSORBOARD, TRAIN_EXTRA, Checkpoint, RunDir

if TYPE_CHECKING:
    from rltap.train.masks import tree_attention_mask, tree_block_mask, tree_mask_mod
    from rltap.train.sync import (
        EmbeddedSync,
        SGLangSync,
        VLLMSync,
        WeightSync,
        save_weights,
        weight_sync,
    )

__all__ = [
    "METRICS",
    "REWARD_PLOT",
    "TENSORBOARD",
    "TRAIN_EXTRA",
    "VERL_KEYS",
    "Attention",
    "Checkpoint",
    "EmbeddedSync",
    "PackLeaf",
    "RunDir",
    "SGLangSync",
    "TreePack",
    "VLLMSync",
    "WeightSync",
    "decode_pack",
    "encode_pack",
    "leaf_values",
    "load_packs",
    "merge_tries",
    "micro_batches",
    "pack_interactions",
    "packed_logprobs",
    "save_packs",
    "save_weights",
    "split_pack",
    "tree_attention_mask",
    "tree_block_mask",
    "tree_mask_mod",
    "verl_batch",
    "weight_sync",
]

# The masks are torch tensors: imported on first use, so `import rltap.train` needs no torch.
# The weight syncs bring in the engines' HTTP client: imported on first use too.
_SYNC = ("EmbeddedSync", "SGLangSync", "VLLMSync", "WeightSync", "save_weights", "weight_sync")
_lazy_getattr = lazy_getattr(
    "rltap.train",
    globals(),
    {
        **dict.fromkeys(
            ("tree_attention_mask", "tree_block_mask", "tree_mask_mod"), "rltap.train.masks"
        ),
        **dict.fromkeys(_SYNC, "rltap.train.sync"),
    },
)


def __getattr__(name: str) -> Any:
    return _lazy_getattr(name)
