"""Tree packs as plain values, so two packs compare token for token with a readable diff."""

from __future__ import annotations

from typing import Any

from rltap.record.pack import TreePack
from rltap.record.pack_io import PACK_ARRAYS


def pack_contents(pack: TreePack) -> dict[str, Any]:
    """Every per-token array (with its dtype), the interaction ids and the leaves of `pack`."""
    contents: dict[str, Any] = {
        name: (str(getattr(pack, name).dtype), getattr(pack, name).tolist()) for name in PACK_ARRAYS
    }
    contents["interaction_ids"] = list(pack.interaction_ids)
    contents["leaves"] = [
        (leaf.interaction_id, leaf.reward, leaf.path.tolist()) for leaf in pack.leaves
    ]
    return contents
