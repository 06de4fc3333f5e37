"""The writer process: what the proxy handed it is committed even if the proxy dies at once;
what the pipe has no room for waits in memory, in order, until it is sent."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rltap.record.types import InteractionWithTokenLogpReward, ModelResponse
from rltap.store import CaptureStore
from rltap.tree.cache import InteractionCache

_CALLS = 50


def _record_calls(store: CaptureStore, session_id: str, content: str = "x") -> InteractionCache:
    store.session_started(session_id, b"\0" * 32, None)
    cache = InteractionCache(store.journal(session_id))
    for number in range(_CALLS):
        response = ModelResponse(
            input_tokens=[1, 2, number], output_tokens=[3], output_logprobs=[-0.1],
            output_versions=[0],
        )  # fmt: skip
        messages = [{"role": "user", "content": f"{content} {number}"}]
        node = cache.add(InteractionWithTokenLogpReward(messages=messages))
        cache.complete(node.interaction_id, response, [{"role": "assistant", "content": "y"}])
    return cache


_KILLED_PROXY = f"""
import asyncio, os, signal, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from pathlib import Path
from rltap.store import CaptureStore
from test_writer import _record_calls

store = CaptureStore(Path(sys.argv[1]))
_record_calls(store, "killed", content=sys.argv[2])
asyncio.run(store.durable())  # what a reply awaits
os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close: the jobs are in the pipe only
"""


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(1, id="calls-the-pipe-holds"),
        pytest.param(1 << 16, id="calls-that-wait-for-room-in-the-pipe"),  # 50 x 64 KiB
    ],
)
def test_a_proxy_killed_right_after_a_reply_loses_none_of_its_calls(
    tmp_path: Path, size: int
) -> None:
    path = tmp_path / "capture.sqlite"
    script = textwrap.dedent(_KILLED_PROXY)
    child = subprocess.run([sys.executable, "-c", script, str(path), "x" * size], check=False)
    assert child.returncode == -signal.SIGKILL
    # Opened again at once: it waits for the dead proxy's writer to commit the rest.
    store = CaptureStore(path)
    assert store.interrupted == 1
    store.close()
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT seq FROM interactions WHERE session_id = 'killed'").fetchall()
        state = conn.execute("SELECT state FROM sessions").fetchall()
    assert sorted(seq for (seq,) in rows) == list(range(_CALLS))
    assert state == [("interrupted",)]


def test_what_the_pipe_has_no_room_for_is_sent_in_order_before_a_reply(tmp_path: Path) -> None:
    path = tmp_path / "capture.sqlite"
    store = CaptureStore(path)
    big = "z" * (1 << 19)  # 50 calls of 512 KiB: far more than the pipe holds
    cache = _record_calls(store, "big", content=big)
    last = cache.last_interaction_id
    assert last is not None
    cache.set_reward(last, 1.0)  # after the rows it updates, in the pipe's order
    asyncio.run(store.durable())
    store.flush()
    with sqlite3.connect(path) as conn:
        count, size = conn.execute(
            "SELECT count(*), sum(length(messages)) FROM interactions"
        ).fetchone()
        reward = conn.execute(
            "SELECT reward FROM interactions WHERE interaction_id = ?", (last,)
        ).fetchone()
    store.close()
    assert count == _CALLS
    assert size > _CALLS * len(big)
    assert reward == (1.0,)
