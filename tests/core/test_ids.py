"""Random ids: 32 hex digits, unique, and a forked child does not repeat its parent's."""

from __future__ import annotations

import os
import re

from rltap.record.ids import random_hex


def test_ids_are_32_hex_digits_and_do_not_repeat() -> None:
    ids = [random_hex() for _ in range(20_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next ids, then leave without running pytest's teardown
        os.write(write, "".join(random_hex() for _ in range(4)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    parent = "".join(random_hex() for _ in range(4))
    assert len(child) == len(parent) == 128
    assert child != parent
