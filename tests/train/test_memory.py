"""`rltap.train.memory.trim_heap`: the free holes between live heap blocks go back to the system.

Each case runs in a fresh interpreter: a 16 MiB block freed first (glibc then serves blocks up to
16 MiB from its heap, as after a training step's freed activations), then 64 blocks of 1 MiB,
every other one freed: 32 MiB of holes between live blocks, which free() alone keeps resident.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import ctypes, ctypes.util, sys
from rltap.train.memory import trim_heap

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

MIB = 2**20
big = libc.malloc(16 * MIB)
libc.memset(big, 1, 16 * MIB)
libc.free(big)
blocks = [libc.malloc(MIB) for _ in range(64)]
for block in blocks:
    libc.memset(block, 1, MIB)
full = rss_mib()
for block in blocks[::2]:
    libc.free(block)
trimmed = trim_heap() if sys.argv[1] == "trim" else False
print(trimmed, full - rss_mib())
"""

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's malloc and /proc: Linux only"
)


def _probe(mode: str) -> tuple[bool, float]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60, check=True
    )
    trimmed, released = result.stdout.split()
    return trimmed == "True", float(released)


def test_trimming_returns_the_holes_between_live_blocks() -> None:
    trimmed, released_mib = _probe("trim")
    assert trimmed
    assert released_mib > 30  # the 32 freed MiB


def test_without_it_free_keeps_them() -> None:
    trimmed, released_mib = _probe("free")
    assert not trimmed
    assert released_mib < 2  # what trimming changes: free() alone gives nothing back
