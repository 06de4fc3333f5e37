"""`make integrations`: every nox session of noxfile.py, `--jobs` at a time.

One session is one pytest process on one torch thread, so on a 2-core machine two sessions side
by side take about half the wall time of one after the other (the core suite runs two pytest
workers for the same reason). Each session's output goes to `.nox-logs/<session>.log` and is
printed whole when the session ends, so two sessions never interleave their lines; a table of
every session, its status and seconds closes the run. The exit status is 1 when a session
failed. Sessions start in the order `nox -l` lists them (noxfile.py is the one list).

A session's nox runs in a process group of its own: when this runner ends, however it ends
(a failure, Ctrl-C, SIGTERM), every group it started is killed, so no pytest or engine it
started outlives it.

    python -m rltap_dev.lanes --jobs 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from threading import Lock

from rich.console import Console
from rich.table import Table

__all__ = ["SessionResult", "list_sessions", "main", "run_sessions"]

LOGS = Path(".nox-logs")


@dataclass(frozen=True, slots=True)
class SessionResult:
    session: str
    returncode: int
    seconds: float
    log: Path


def list_sessions(nox: Sequence[str]) -> list[str]:
    """The sessions noxfile.py declares, in its order."""
    listed = subprocess.run([*nox, "-l", "--json"], capture_output=True, text=True, check=True)
    return [entry["session"] for entry in json.loads(listed.stdout)]


class _Groups:
    """The process groups started and not yet ended, killed together on the way out."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def start(self, argv: list[str], log: Path) -> subprocess.Popen[bytes] | None:
        with self._lock:
            if self.stopping:
                return None
            with log.open("wb") as out:
                process = subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            self._running.add(process)
            return process

    def done(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.discard(process)

    def kill_all(self) -> None:
        with self._lock:
            self.stopping = True
            for process in self._running:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)


def run_sessions(sessions: Sequence[str], nox: Sequence[str], jobs: int) -> list[SessionResult]:
    """Run `sessions` `jobs` at a time, printing each one's log as it ends."""
    LOGS.mkdir(exist_ok=True)
    groups = _Groups()
    printing = Lock()

    def run(session: str) -> SessionResult:
        log = LOGS / f"{_file_name(session)}.log"
        started = time.monotonic()
        process = groups.start([*nox, "-s", session], log)
        returncode = -1 if process is None else process.wait()
        if process is not None:
            groups.done(process)
        result = SessionResult(session, returncode, time.monotonic() - started, log)
        with printing:
            sys.stdout.write(log.read_text(errors="replace"))
            sys.stdout.flush()
        return result

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        return list(pool.map(run, sessions))
    finally:
        # Killed first: the lanes' threads wait on their sessions, and the pool on its threads.
        groups.kill_all()
        pool.shutdown(wait=True, cancel_futures=True)
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _file_name(session: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in session).strip("-")


def _table(results: Sequence[SessionResult]) -> Table:
    table = Table(title="nox sessions")
    for column in ("session", "status", "seconds", "log"):
        table.add_column(column, justify="right" if column == "seconds" else "left")
    for result in results:
        status = "ok" if result.returncode == 0 else f"failed ({result.returncode})"
        table.add_row(result.session, status, f"{result.seconds:.0f}", str(result.log))
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rltap_dev.lanes", description=__doc__)
    parser.add_argument("--jobs", type=int, default=2, help="sessions at a time (default 2)")
    parser.add_argument("--nox", default="nox", help="the nox command line (default: nox on PATH)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    nox = shlex.split(args.nox)
    results = run_sessions(list_sessions(nox), nox, args.jobs)
    Console().print(_table(results))
    return 0 if all(result.returncode == 0 for result in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
