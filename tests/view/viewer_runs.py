"""What the viewer tests serve: a folder of two runs made from the recorded store, and the
viewer's app on a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from rltap.view import create_view_app

TRAIN_REWARDS = [0.1, 0.3, 0.2, 0.6, 0.9]


def make_runs(store: Path, root: Path) -> Path:
    """root/rollout (a copy of `store`) and root/train (another, with five steps' metrics as
    `rltap train` writes them)."""
    from rltap.train.run_dir import RunDir

    for name in ("rollout", "train"):
        (root / name).mkdir()
        with (
            sqlite3.connect(store) as source,
            sqlite3.connect(root / name / "capture.sqlite") as copy,
        ):
            source.backup(copy)  # the restarted proxy still has it open
    run = RunDir(root / "train")
    for step, reward in enumerate(TRAIN_REWARDS, start=1):
        run.log(step, {"reward_mean": reward, "reward_std": 0.1})
    run.close()
    return root


@contextlib.contextmanager
def serving(source: Path) -> Iterator[str]:
    """The viewer of `source` on a free port; yields its URL."""
    config = uvicorn.Config(create_view_app(source), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the viewer did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
