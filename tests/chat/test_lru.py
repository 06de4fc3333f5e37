"""LRUCache keeps at most its limit, dropping the least recently used entry first."""

from __future__ import annotations

import threading

import pytest

from rltap.chat.lru import LRUCache


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the newest
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    assert len(cache) == 2


def test_putting_a_cached_key_again_replaces_its_value_without_growing() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("a", 2)
    assert (cache.get("a"), len(cache)) == (2, 1)


def test_a_cache_must_hold_something() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LRUCache(0)


def test_threads_sharing_a_cache_keep_it_within_its_limit() -> None:
    cache: LRUCache[int, int] = LRUCache(16)

    def work(offset: int) -> None:
        for number in range(2000):
            key = (number * 7 + offset) % 64
            if cache.get(key) is None:
                cache.put(key, key)

    threads = [threading.Thread(target=work, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 16
    assert all(cache.get(key) in (None, key) for key in range(64))
