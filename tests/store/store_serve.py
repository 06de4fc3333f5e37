"""`rltap serve --store` as a real process: started, killed with SIGKILL, started again."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ADMIN_KEY = "store-test-admin-key-0123456789"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServeProcess:
    """One `rltap serve` process on a free port, with the scripted engine and `store`."""

    def __init__(self, model_dir: Path, store: Path, *flags: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "rltap.cli", "serve", "--port", str(self.port),
            "--admin-key", ADMIN_KEY, "--engine", "scripted",
            "--script", "rltap.testing.scripts:echo", "--model", str(model_dir),
            "--model-name", "tiny", "--store", str(store), *flags,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "RLTAP_ADMIN_KEY"}
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 90
        while True:
            assert self.process.poll() is None, "rltap serve exited while starting"
            try:
                if httpx.get(f"{self.url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "rltap serve did not come up"
                time.sleep(0.2)

    def admin(self, path: str, body: dict[str, Any]) -> httpx.Response:
        headers = {"authorization": f"Bearer {ADMIN_KEY}"}
        return httpx.post(f"{self.url}{path}", json=body, headers=headers, timeout=60)

    def session(self, path: str, key: str, body: dict[str, Any]) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"}
        return httpx.post(f"{self.url}{path}", json=body, headers=headers, timeout=60)

    def kill(self) -> None:
        """SIGKILL: no shutdown code of the proxy runs."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
