"""Training on rltap's data: tree-packed trajectories (`rltap.record.pack`), a torch model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rltap._lazy import lazy_getattr
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
    "RunDir",
    "SGLangSync",
    "VLLMSync",
    "WeightSync",
    "leaf_values",
    "micro_batches",
    "packed_logprobs",
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
