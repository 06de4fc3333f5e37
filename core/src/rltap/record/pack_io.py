"""A `TreePack` (`rltap.record.pack`) as named arrays: on the wire and in `batch.safetensors`.

On the wire (`/export_trajectories` with style "tree", `encode_pack` / `decode_pack`):
`{"tensors": {name: rltap tensor envelope}, "interaction_ids": [...], "leaves": [{"interaction_id",
"reward", "path": envelope}], "interaction_policies": [...]}` (that last key only where the pack
has policies: `TreePack.interaction_policies`), where the tensors are the pack's per-token arrays
(`PACK_ARRAYS`, each shape [N]) in `rltap.record.tensor_codec`'s rltap envelope, and a leaf's
path is an int32 [len].

In a file (`save_packs` / `load_packs`; `rltap rollout --style tree` writes its `batch.safetensors`
this way), P packs laid end to end, every index local to its own pack:
- each of `PACK_ARRAYS`, shape [N] (N: the tokens of all packs);
- `pack_offsets` int32 [P + 1]: pack p holds tokens `pack_offsets[p]:pack_offsets[p + 1]`, and its
  `parent_index`, `subtree_end` and leaf paths count from its first token;
- `pack_leaves` int32 [P + 1]: pack p's leaves are `pack_leaves[p]:pack_leaves[p + 1]`;
- `leaf_paths` int32 [sum of path lengths], `leaf_offsets` int32 [leaves + 1]: leaf l's path is
  `leaf_paths[leaf_offsets[l]:leaf_offsets[l + 1]]`; `leaf_rewards` float64 [leaves] (a leaf's
  reward as exported, not rounded: the file holds what a trainer got in memory);
  `leaf_interaction` int32 [leaves]: its interaction, an index into `interaction_ids`;
- metadata (safetensors' string header): `interaction_ids`, a JSON list of all packs' ids, and
  `interaction_offsets`, JSON [P + 1]: pack p's are `interaction_ids[offsets[p]:offsets[p + 1]]`
  (its `interaction_index` counts in them); `interaction_policies`, a JSON list beside
  `interaction_ids` (null: the base model), only where some pack has policies.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rltap.record.pack import PackLeaf, TreePack, joined_policies
from rltap.record.tensor_codec import decode_array, decode_arrays, encode_tensor, encode_tensors

__all__ = [
    "PACK_ARRAYS",
    "concat_packs",
    "decode_pack",
    "encode_pack",
    "load_packs",
    "pack_arrays",
    "save_packs",
]

# The per-token arrays, in the pack's field order.
PACK_ARRAYS = tuple(
    f.name
    for f in dataclasses.fields(TreePack)
    if f.name not in ("interaction_ids", "leaves", "interaction_policies")
)


def pack_arrays(pack: TreePack) -> dict[str, np.ndarray]:
    """The per-token arrays of `pack` by name (`PACK_ARRAYS`)."""
    return {name: getattr(pack, name) for name in PACK_ARRAYS}


def _pack(
    arrays: Mapping[str, np.ndarray],
    interaction_ids: list[str],
    leaves: list[PackLeaf],
    policies: list[str | None] | None = None,
) -> TreePack:
    missing = [name for name in PACK_ARRAYS if name not in arrays]
    if missing:
        msg = f"a tree pack needs the arrays {missing}"
        raise ValueError(msg)
    return TreePack(
        **{name: np.asarray(arrays[name]) for name in PACK_ARRAYS},
        interaction_ids=interaction_ids,
        leaves=leaves,
        interaction_policies=policies,
    )


def encode_pack(pack: TreePack) -> dict[str, Any]:
    """The JSON form of `pack` (module docstring)."""
    leaves = [
        {
            "interaction_id": leaf.interaction_id,
            "reward": leaf.reward,
            "path": encode_tensor(leaf.path),
        }
        for leaf in pack.leaves
    ]
    body: dict[str, Any] = {
        "tensors": encode_tensors(pack_arrays(pack)),
        "interaction_ids": list(pack.interaction_ids),
        "leaves": leaves,
    }
    if pack.interaction_policies is not None:
        body["interaction_policies"] = list(pack.interaction_policies)
    return body


def decode_pack(body: Mapping[str, Any]) -> TreePack:
    """The `TreePack` of `encode_pack`'s JSON form."""
    arrays = decode_arrays(body["tensors"])
    leaves = [
        PackLeaf(str(leaf["interaction_id"]), float(leaf["reward"]), decode_array(leaf["path"]))
        for leaf in body["leaves"]
    ]
    policies = body.get("interaction_policies")
    return _pack(arrays, [str(i) for i in body["interaction_ids"]], leaves, policies)


def concat_packs(packs: Sequence[TreePack]) -> tuple[TreePack, np.ndarray]:
    """The (one or more) packs end to end as one forest, nothing merged (no token of one sees a
    token of another), and where each starts (`pack_offsets`, [P + 1])."""
    if not packs:
        msg = "no packs to lay end to end"
        raise ValueError(msg)
    offsets = _offsets([len(pack) for pack in packs])
    counts = _offsets([len(pack.interaction_ids) for pack in packs])
    arrays: dict[str, np.ndarray] = {}
    for name in PACK_ARRAYS:
        parts = [getattr(pack, name) for pack in packs]
        if name in ("parent_index", "subtree_end", "interaction_index"):
            # Indices shift by what comes before; -1 (a root, a prompt token) stays -1.
            shift = counts if name == "interaction_index" else offsets
            parts = [np.where(part < 0, part, part + shift[k]) for k, part in enumerate(parts)]
        arrays[name] = np.concatenate(parts).astype(getattr(packs[0], name).dtype)
    leaves = [
        PackLeaf(leaf.interaction_id, leaf.reward, (leaf.path + offsets[k]).astype(np.int32))
        for k, pack in enumerate(packs)
        for leaf in pack.leaves
    ]
    ids = [interaction_id for pack in packs for interaction_id in pack.interaction_ids]
    return _pack(arrays, ids, leaves, joined_policies(packs)), offsets


def save_packs(path: Path, packs: Sequence[TreePack]) -> None:
    """Write `packs` as one safetensors file (keys in the module docstring)."""
    from safetensors.numpy import save_file

    leaves = [leaf for pack in packs for leaf in pack.leaves]
    ids = [interaction_id for pack in packs for interaction_id in pack.interaction_ids]
    index_of = {interaction_id: k for k, interaction_id in enumerate(ids)}
    tensors = {name: np.concatenate([getattr(p, name) for p in packs]) for name in PACK_ARRAYS}
    tensors |= {
        "pack_offsets": _offsets([len(pack) for pack in packs]),
        "pack_leaves": _offsets([len(pack.leaves) for pack in packs]),
        "leaf_paths": np.concatenate([np.zeros(0, np.int32), *(leaf.path for leaf in leaves)]),
        "leaf_offsets": _offsets([len(leaf.path) for leaf in leaves]),
        "leaf_rewards": np.array([leaf.reward for leaf in leaves], dtype=np.float64),
        "leaf_interaction": np.array([index_of[leaf.interaction_id] for leaf in leaves], np.int32),
    }
    metadata = {
        "interaction_ids": json.dumps(ids),
        "interaction_offsets": json.dumps(
            _offsets([len(p.interaction_ids) for p in packs]).tolist()
        ),
    }
    policies = joined_policies(packs)
    if policies is not None:
        metadata["interaction_policies"] = json.dumps(policies)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path), metadata)


def _offsets(sizes: Sequence[int]) -> np.ndarray:
    return np.cumsum([0, *sizes]).astype(np.int32)


def load_packs(path: Path) -> list[TreePack]:
    """The packs `save_packs` wrote."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as handle:
        metadata = handle.metadata()
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    ids: list[str] = json.loads(metadata["interaction_ids"])
    counts: list[int] = json.loads(metadata["interaction_offsets"])
    policies = json.loads(metadata.get("interaction_policies") or "null")
    tokens, leaf_of, paths = (
        tensors["pack_offsets"],
        tensors["pack_leaves"],
        tensors["leaf_offsets"],
    )
    packs = []
    for p in range(len(tokens) - 1):
        arrays = {name: tensors[name][tokens[p] : tokens[p + 1]] for name in PACK_ARRAYS}
        leaves = [
            PackLeaf(
                ids[int(tensors["leaf_interaction"][leaf])],
                float(tensors["leaf_rewards"][leaf]),
                tensors["leaf_paths"][paths[leaf] : paths[leaf + 1]],
            )
            for leaf in range(int(leaf_of[p]), int(leaf_of[p + 1]))
        ]
        own = None if policies is None else policies[counts[p] : counts[p + 1]]
        packs.append(_pack(arrays, ids[counts[p] : counts[p + 1]], leaves, own))
    return packs
