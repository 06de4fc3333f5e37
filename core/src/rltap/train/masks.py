"""Attention masks of a `TreePack`: each token attends to its ancestors and to itself.

Token i sees token j iff `j <= i < subtree_end[j]` (the pack's DFS enter/exit interval test, see
`rltap.record.pack`). The same test in three forms:

- `tree_attention_mask(pack)`: a dense `[1, 1, N, N]` bool tensor, True where a query may attend,
  SDPA's `attn_mask` convention; with a float `dtype`, the additive form (0 where seen, the
  dtype's minimum elsewhere) that eager attention adds to its scores. A Hugging Face model passes
  a 4D mask through to its attention as-is (`transformers.masking_utils`: "If the mask is already
  4D, simply return as-is").
- `tree_mask_mod(subtree_end)`: the test as a FlexAttention `mask_mod`, reading only the pack's
  `subtree_end` array.
- `tree_block_mask(pack)`: a FlexAttention `BlockMask` built from the intervals one block pair at
  a time, `O(N + (N / block_size)^2)`: no `N x N` tensor is ever made (torch's
  `create_block_mask` evaluates the `mask_mod` over every token pair). A block pair is empty,
  full (every query of the block sees every key of it: the kernel skips the `mask_mod`) or
  partial (the kernel applies the `mask_mod`).

Why block pairs are cheap to classify: the queries that see key j are one contiguous range
`[j, subtree_end[j])`, and every range of a key block starts inside that block, so the query
blocks a key block reaches run from its own block to the block of its largest `subtree_end`; it
reaches a later query block fully when its smallest `subtree_end` lies past that block's end.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import BlockMask

from rltap.record.pack import TreePack

__all__ = ["MaskMod", "tree_attention_mask", "tree_block_mask", "tree_mask_mod"]

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def tree_attention_mask(
    pack: TreePack, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.bool
) -> torch.Tensor:
    """The dense `[1, 1, N, N]` ancestor mask: bool (True: attend), or additive for a float
    `dtype`."""
    end = torch.as_tensor(pack.subtree_end, dtype=torch.long, device=device)
    index = torch.arange(len(end), device=device)
    query, key = index[:, None], index[None, :]
    sees = (key <= query) & (query < end[None, :])
    if dtype == torch.bool:
        return sees[None, None]
    additive = torch.zeros(sees.shape, dtype=dtype, device=device)
    return additive.masked_fill_(~sees, torch.finfo(dtype).min)[None, None]


def tree_mask_mod(subtree_end: torch.Tensor) -> MaskMod:
    """The interval test as a FlexAttention `mask_mod(batch, head, q_idx, kv_idx)`.

    `subtree_end` must cover every key index the kernel may ask about: pad it past the pack
    with zeros (a key that nothing sees), as `tree_block_mask` does to a whole block."""

    def sees(
        batch: torch.Tensor, head: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        return (kv_idx <= q_idx) & (q_idx < subtree_end[kv_idx])

    return sees


def tree_block_mask(
    pack: TreePack, *, block_size: int = 128, device: torch.device | str | None = None
) -> BlockMask:
    """The pack's FlexAttention `BlockMask` (batch 1, every head alike), from the intervals."""
    n = len(pack)
    blocks = max(1, -(-n // block_size))
    end = torch.zeros(blocks * block_size, dtype=torch.long, device=device)
    end[:n] = torch.as_tensor(pack.subtree_end, dtype=torch.long, device=device)
    partial, full = _block_pairs(end, n, block_size)
    kv_num_blocks, kv_indices = _listed(partial)
    full_kv_num_blocks, full_kv_indices = _listed(full)
    return BlockMask.from_kv_blocks(
        kv_num_blocks,
        kv_indices,
        full_kv_num_blocks,
        full_kv_indices,
        BLOCK_SIZE=block_size,
        mask_mod=tree_mask_mod(end),
        seq_lengths=(n, n),
    )


def _block_pairs(end: torch.Tensor, n: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The partial and the full (query block, key block) pairs, each `[blocks, blocks]` bool.

    `end` is `subtree_end` padded with zeros to whole blocks."""
    blocks = len(end) // block_size
    by_block = end.view(blocks, block_size)
    largest_end = by_block.amax(dim=1)
    smallest_end = by_block.amin(dim=1)
    block = torch.arange(blocks, device=end.device)
    first = block * block_size
    last = first + block_size - 1
    query, key = block[:, None], block[None, :]
    reached = (query >= key) & (first[:, None] < largest_end[None, :])
    # Full: the block's last key comes no later than the query block's first query (every key
    # is an ancestor or itself), and every key's range runs past the query block's last query.
    # A block cut short by the pack's end stays partial: its padding is masked by the mask_mod
    # (as in torch's create_block_mask), not left to the kernel.
    full = (last[None, :] <= first[:, None]) & (last[:, None] < smallest_end[None, :])
    whole = last < n
    full &= reached & whole[:, None] & whole[None, :]
    return reached & ~full, full


def _listed(pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`BlockMask.from_kv_blocks`' form of a `[blocks, blocks]` pair table: per query block, how
    many key blocks, and their indices first (ascending) in a full-width row."""
    count = pairs.sum(dim=1, dtype=torch.int32)
    indices = torch.argsort(pairs.to(torch.int8), dim=1, descending=True, stable=True)
    return count[None, None], indices.to(torch.int32)[None, None]
