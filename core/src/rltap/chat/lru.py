"""The one bounded cache of rltap.chat: at most N entries, the least recently used dropped first.

Usage:
    cache: LRUCache[str, list[int]] = LRUCache(8192)
    ids = cache.get(piece)
    if ids is None:
        ids = encode(piece)
        cache.put(piece, ids)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LRUCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """A mapping of at most `max_entries` keys; a `get` that finds its key makes it the newest.

    Safe to share between threads (one lock around each call).
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            msg = f"max_entries must be at least 1, got {max_entries}"
            raise ValueError(msg)
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._max_entries = max_entries
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value of `key`, or None if it is not cached."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Cache `value` under `key`, dropping the least recently used entry when full."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            if len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
