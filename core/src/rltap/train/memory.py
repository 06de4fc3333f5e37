"""The training process's heap, given back after every step so a long run's RSS stays flat.

A training step allocates and frees tensors of a different size every step (each step's
episodes have their own lengths). glibc's malloc serves a large block from `mmap` and unmaps it on
free, but raises that threshold to the size of each such block freed (up to 32 MB): soon the
activations and gradient buffers come from the heap, and the free holes between its live blocks
stay resident. `rltap train` of SmolLM2-135M (fp32, AdamW, engine and trainer in one process)
grew to 12-15 GB of RSS in eight steps that way.

`trim_heap()` after each step hands those free pages back (`malloc_trim`, glibc's own call): the
trainer's steps alone then hold 2.4 GB after eight steps instead of 5.0, at the same step time
(bench/train_memory.py measures both side by side; a fixed mmap threshold, the other cure, held
the same 2.4 GB but made the steps 14-22% slower). Elsewhere than glibc there is nothing to do.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["trim_heap"]


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name)
    # musl and macOS have no malloc_trim: there, freed memory is the allocator's own business
    return libc if hasattr(libc, "malloc_trim") else None


def trim_heap() -> bool:
    """Give the heap's free pages back to the system; True when some were."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
