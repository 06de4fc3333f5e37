"""Tree packs as plain values, so two packs compare token for token with a readable diff."""

from __future__ import annotations

from typing import Any

import numpy as np

from rltap.record.pack import TreePack
from rltap.record.pack_io import PACK_ARRAYS


def pack_contents(pack: TreePack, *, float32_rewards: bool = False) -> dict[str, Any]:
    """Every per-token array (with its dtype), the interaction ids and the leaves of `pack`.

    `float32_rewards` rounds each leaf's reward to float32, as trajectory lines hold rewards
    (the tensors' dtype): to compare a pack rebuilt from lines with the one the proxy exported,
    whose leaf rewards are exact."""
    contents: dict[str, Any] = {
        name: (str(getattr(pack, name).dtype), getattr(pack, name).tolist()) for name in PACK_ARRAYS
    }
    contents["interaction_ids"] = list(pack.interaction_ids)
    contents["leaves"] = [
        (
            leaf.interaction_id,
            float(np.float32(leaf.reward)) if float32_rewards else leaf.reward,
            leaf.path.tolist(),
        )
        for leaf in pack.leaves
    ]
    return contents
