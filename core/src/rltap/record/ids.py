"""Random ids for requests and interactions: 128 bits as 32 hex digits, without a system call.

`uuid.uuid4()` reads 16 bytes from the kernel on every call and builds a UUID object; the proxy
makes two such ids per call. These ids need to be unique, not secret (a session's key is what
guards it, and keys still come from `secrets`), so a generator of this process, seeded from
`os.urandom` and seeded again in a forked child, gives them in a fraction of the time.
"""

from __future__ import annotations

import os
import random

__all__ = ["random_hex"]

_generator = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _generator.seed(os.urandom(32)))


def random_hex() -> str:
    """32 random hex digits (128 bits), like `uuid.uuid4().hex` without the version bits."""
    return f"{_generator.getrandbits(128):032x}"
