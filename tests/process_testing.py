"""Processes in tests: rltap's fake vLLM server as one of its own, and what tests that start
processes check afterwards (which are still there, from Linux's /proc)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

# Python's multiprocessing resource tracker, started with the first spawned rank, lives as long
# as the test process: it is no process of the command under test.
RESOURCE_TRACKER = "multiprocessing.resource_tracker"


@contextlib.contextmanager
def fake_vllm_process(*flags: str, python_flags: Sequence[str] = ()) -> Iterator[str]:
    """`python -m rltap.testing.fakes.vllm` on a free port with `flags` (`python_flags` go to
    Python itself); yields its URL once `/health` answers, and ends it after the block."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, *python_flags, "-m", "rltap.testing.fakes.vllm"]
    process = subprocess.Popen([*command, "--port", str(port), *flags])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, "the fake vLLM process exited"
            assert time.monotonic() < deadline, "the fake vLLM process did not come up"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def descendant_pids(pid: int) -> list[int]:
    """`pid`'s processes, their processes and so on."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        todo.extend(parents.get(child, []))
        found.append(child)
    return found


def command_line(pid: int) -> str | None:
    """`pid`'s command line, or None once it has ended (a zombie has none either)."""
    with contextlib.suppress(OSError):
        line = (Path("/proc") / str(pid) / "cmdline").read_text().replace("\0", " ").strip()
        return line or None
    return None


def left_behind(before: set[int], wait: float = 30.0) -> list[str]:
    """This process's descendants that were not among `before` (its descendants when the
    command under test started: other tests' servers may live on in the same pytest worker),
    once they had `wait` seconds to end (a killed process takes a moment), but the resource
    tracker."""
    deadline = time.monotonic() + wait
    while True:
        left = [
            line
            for pid in descendant_pids(os.getpid())
            if pid not in before
            and (line := command_line(pid)) is not None
            and RESOURCE_TRACKER not in line
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def still_running(pids: list[int], wait: float = 30.0) -> list[str]:
    """The command lines of `pids` that are still running after up to `wait` seconds."""
    deadline = time.monotonic() + wait
    while True:
        alive = [line for pid in pids if (line := command_line(pid)) is not None]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)
