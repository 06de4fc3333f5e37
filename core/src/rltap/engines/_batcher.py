"""The rows that decode together: one left-padded KV cache, its padding mask and positions.

Rows join in groups prefilled together (`_prefill`), each group's cache left-padded to its
longest prompt. Joining the batch left-pads the shorter of the two caches, and a group's own
padding is zeroed: padding is zero keys/values that the attention mask hides. Position ids
stay each sequence's own (0, 1, 2, ... from its first real token), so a row computes the same
attention as it would alone, up to float summation order.
Leaving the batch drops the row and trims leading columns that are padding in every row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import torch

from rltap.record.errors import EngineError

__all__ = ["KVBatch", "check_cache_layout"]

RowT = TypeVar("RowT")


def check_cache_layout(cache: Any) -> None:
    """Fail early on caches this batcher cannot splice (sliding-window, linear or static layers)."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        msg = "the embedded engine needs transformers >= 4.56 (DynamicCache.layers)"
        raise EngineError(msg)
    from transformers.cache_utils import DynamicLayer

    for layer in layers:
        if type(layer) is not DynamicLayer:
            msg = f"unsupported KV cache layer {type(layer).__name__}: only full attention"
            raise EngineError(msg)


def _kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _set_kv(cache: Any, kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for layer, (keys, values) in zip(cache.layers, kv, strict=True):
        layer.keys, layer.values = keys, values


def _left_pad(t: torch.Tensor, n: int) -> torch.Tensor:
    if n == 0:
        return t
    pad = t.new_zeros((t.shape[0], t.shape[1], n, t.shape[3]))
    return torch.cat([pad, t], dim=2)


def _zero_padding(cache: Any, mask: torch.Tensor) -> None:
    # What a batched prefill computed at padded positions is hidden, but must not be NaN or
    # inf: the masked attention weight (0) times a NaN value is still NaN.
    hidden = (mask == 0).to(_kv(cache)[0][0].device)[:, None, :, None]
    _set_kv(cache, [(k.masked_fill(hidden, 0), v.masked_fill(hidden, 0)) for k, v in _kv(cache)])


def _zeros_like_rows(t: torch.Tensor, rows: int, length: int) -> torch.Tensor:
    return t.new_zeros((rows, t.shape[1], length, t.shape[3]))


class KVBatch(Generic[RowT]):
    """Rows decoding in lockstep, one token per row per step.

    Invariant: `mask[i]` is 0 on row i's left padding and 1 on its cached tokens; `positions[i]`
    is how many real tokens row i has cached; `next_tokens[i]` is the token it feeds next.
    `cache is None` means no row has cached anything yet (all prompts were one token long).
    """

    def __init__(self, new_cache: Callable[[], Any], device: torch.device) -> None:
        self._new_cache = new_cache
        self._device = device
        self.rows: list[RowT] = []
        self.cache: Any = None
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=device)
        self.positions: list[int] = []
        self.next_tokens: list[int] = []

    @property
    def length(self) -> int:
        """Columns in the cache (the longest row plus its padding)."""
        return int(self.mask.shape[1])

    def reset(self) -> None:
        self.rows, self.cache, self.positions, self.next_tokens = [], None, [], []
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=self._device)

    def add(
        self,
        rows: Sequence[RowT],
        cache: Any,
        mask: torch.Tensor,
        next_tokens: Sequence[int],
        source: Sequence[int] | None = None,
    ) -> None:
        """Join `rows`, whose own `cache` (None when `mask` has no columns) holds what `mask`
        [cache rows, columns] marks 1, each row left-padded to the longest of them.

        `rows[i]` takes cache row `source[i]` (default: row i): rows with the same prompt
        share one prefill, each then holding a copy of it.
        """
        if cache is not None and not bool(mask.all()):
            _zero_padding(cache, mask)
        if source is not None and list(source) != list(range(mask.shape[0])):
            index = torch.tensor(source, device=mask.device)
            mask = mask.index_select(0, index)
            if cache is not None:
                _set_kv(cache, [(k[index], v[index]) for k, v in _kv(cache)])
        old_len, old_rows, new_len = self.length, len(self.rows), int(mask.shape[1])
        target = max(old_len, new_len)
        if target > 0:
            self.cache = self._merge(cache, (old_len, old_rows), (new_len, len(rows)), target)
        old_mask = torch.nn.functional.pad(self.mask, (target - old_len, 0))
        new_mask = torch.nn.functional.pad(mask.to(self._device, torch.long), (target - new_len, 0))
        self.mask = torch.cat([old_mask, new_mask], dim=0)
        self.rows.extend(rows)
        self.positions.extend(int(n) for n in mask.sum(dim=1).tolist())
        self.next_tokens.extend(next_tokens)

    def _merge(self, cache: Any, old: tuple[int, int], new: tuple[int, int], target: int) -> Any:
        """The batch cache followed by `cache`'s rows, both left-padded to `target` columns;
        `old` and `new` are each side's (columns, rows)."""
        old_kv = _kv(self.cache) if self.cache is not None else None
        new_kv = _kv(cache) if cache is not None else None
        reference = old_kv if old_kv is not None else new_kv
        assert reference is not None  # target > 0: one side holds tokens
        merged = []
        for layer, (ref_k, ref_v) in enumerate(reference):
            parts = []
            for side, (length, rows) in ((old_kv, old), (new_kv, new)):
                if rows == 0:
                    continue
                if side is None:
                    # This side cached nothing yet: all padding.
                    parts.append(
                        (
                            _zeros_like_rows(ref_k, rows, target),
                            _zeros_like_rows(ref_v, rows, target),
                        )
                    )
                else:
                    k, v = side[layer]
                    parts.append((_left_pad(k, target - length), _left_pad(v, target - length)))
            merged.append((torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])))
        holder = self.cache if self.cache is not None else cache
        _set_kv(holder, merged)
        return holder

    def keep(self, keep_row: Callable[[RowT], bool]) -> None:
        """Drop the rows `keep_row` rejects, then the columns left as padding in every row."""
        indices = [i for i, row in enumerate(self.rows) if keep_row(row)]
        if len(indices) == len(self.rows):
            return
        if not indices:
            self.reset()
            return
        index = torch.tensor(indices, device=self._device)
        self.rows = [self.rows[i] for i in indices]
        self.positions = [self.positions[i] for i in indices]
        self.next_tokens = [self.next_tokens[i] for i in indices]
        self.mask = self.mask.index_select(0, index)
        used = self.mask.any(dim=0).nonzero()
        first = int(used[0]) if used.numel() else self.length
        self.mask = self.mask[:, first:]
        if self.cache is not None:
            kv = [
                (k.index_select(0, index)[:, :, first:], v.index_select(0, index)[:, :, first:])
                for k, v in _kv(self.cache)
            ]
            _set_kv(self.cache, kv)
            if self.length == 0:
                self.cache = None

    def step_inputs(self, cache_kwarg: str) -> dict[str, Any]:
        """Keyword arguments for one decode forward over every row."""
        if self.cache is None:
            self.cache = self._new_cache()
        ones = torch.ones((len(self.rows), 1), dtype=torch.long, device=self._device)
        return {
            "input_ids": torch.tensor([[t] for t in self.next_tokens], device=self._device),
            "attention_mask": torch.cat([self.mask, ones], dim=1),
            "position_ids": torch.tensor([[p] for p in self.positions], device=self._device),
            cache_kwarg: self.cache,
            "use_cache": True,
        }

    def advance(self, tokens: Sequence[int]) -> None:
        """Record that every row cached its fed token and will feed `tokens[i]` next."""
        ones = torch.ones((len(self.rows), 1), dtype=torch.long, device=self._device)
        self.mask = torch.cat([self.mask, ones], dim=1)
        self.positions = [p + 1 for p in self.positions]
        self.next_tokens = list(tokens)
