"""Training on rltap's data: tree-packed trajectories (`rltap.record.pack`) through a torch model.

torch is imported here, at the top: `rltap.train` is the trainer, and only the layers above it
(the training loop's callers, the CLI) import it; the data it trains on lives in `rltap.record`.
"""

from __future__ import annotations

from rltap._lazy import require_module

require_module("torch", "rltap[embedded]", "rltap.train")

from rltap.train.batches import micro_batches, split_pack  # noqa: E402
from rltap.train.forward import Attention, packed_logprobs  # noqa: E402
from rltap.train.layouts import VERL_KEYS, leaf_values, verl_batch  # noqa: E402
from rltap.train.masks import tree_attention_mask, tree_block_mask, tree_mask_mod  # noqa: E402
from rltap.train.run_dir import (  # noqa: E402
    METRICS,
    REWARD_PLOT,
    TENSORBOARD,
    TRAIN_EXTRA,
    Checkpoint,
    RunDir,
)
from rltap.train.sync import WeightSync, save_weights, weight_source, weight_sync  # noqa: E402

__all__ = [
    "METRICS",
    "REWARD_PLOT",
    "TENSORBOARD",
    "TRAIN_EXTRA",
    "VERL_KEYS",
    "Attention",
    "Checkpoint",
    "RunDir",
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
    "weight_source",
    "weight_sync",
]
