"""One engine server process rltap started (`ManagedServer`): its own process group, its output
appended to its log, `/health`, its log's last lines, and stopping the whole group (vLLM's API
server and its engine-core process). `rltap.engines.managed` runs several of them for a run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from rltap.engines.launch import ServerSpec
from rltap.record.errors import EngineServerFailed

__all__ = ["ManagedServer"]

_TAIL_LINES = 40
_PR_SET_PDEATHSIG = 1


class ManagedServer:
    """One server process: started, asked whether it is up, stopped with its whole group."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        """Start the process in a new process group, its output appended to its log."""
        self.spec.log.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with self.spec.log.open("ab") as log:
            log.write(f"--- rltap starts {self.spec.name} ({self.starts}): ".encode())
            log.write(" ".join(self.spec.command.argv).encode() + b"\n")
            log.flush()
            in_main = threading.current_thread() is threading.main_thread()
            self.process = subprocess.Popen(
                self.spec.command.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.spec.command.env},
                start_new_session=True,
                preexec_fn=_die_with_parent if in_main and sys.platform == "linux" else None,
            )

    def returncode(self) -> int | None:
        """The exit status once the process ended, else None."""
        return None if self.process is None else self.process.poll()

    def healthy(self) -> bool:
        """Whether `GET /health` answers 200 now."""
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(f"{self.spec.url}/health", timeout=2) as response,
        ):
            return bool(response.status == 200)
        return False

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last `lines` lines of its log."""
        try:
            with self.spec.log.open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 64 * 1024))
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def terminate(self) -> None:
        """SIGTERM to its process group."""
        if self.process is not None:
            _signal_group(self.process.pid, signal.SIGTERM)

    def wait_stopped(self, deadline: float) -> bool:
        """Wait until its group is gone (its own process reaped); False at `deadline`."""
        if self.process is None:
            return True
        while True:
            self.process.poll()
            if not _group_alive(self.process.pid):
                self.process.poll()
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL to its process group, and wait for it."""
        if self.process is not None:
            _signal_group(self.process.pid, signal.SIGKILL)
            self.wait_stopped(time.monotonic() + 10)

    def failure(self, what: str) -> EngineServerFailed:
        """`EngineServerFailed` saying `what` of this server, with its log's last lines."""
        msg = (
            f"engine server {self.spec.name} ({self.spec.url}) {what}; the last lines of its "
            f"log {self.spec.log}:\n{self.log_tail()}"
        )
        return EngineServerFailed(msg)


def _die_with_parent() -> None:
    """In the child between fork and exec: SIGTERM when the thread that started it ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies, already ended, do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return not Path("/proc/self/stat").exists()  # no /proc: trust killpg
