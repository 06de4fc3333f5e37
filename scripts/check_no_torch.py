"""rltap's two light installs, each in a virtual environment of its own.

1. `pip install ./core` (the slim install, `.venv-slim`): none of the server or ML stack is
   installed (`rltap._lazy.OPTIONAL_MODULES`), the adapters' surface (`SLIM_SURFACE`) imports, and
   `rltap serve` refuses with an ImportError naming the `server` extra.
2. `pip install './core[server,testing]'` without torch (`.venv-notorch`): from that
   environment alone, builds the offline Qwen tokenizer, starts the fake vLLM server
   (`python -m rltap.testing.fakes.vllm`), runs `rltap serve --engine vllm --url URL --tokenizer
   DIR`, opens a session, asks for one chat completion and exports it.

Exits non-zero on any failure. `make test` runs it (`make no-torch` alone).

Run: .venv/bin/python scripts/check_no_torch.py [--venv .venv-notorch] [--slim-venv .venv-slim]
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rltap._lazy import OPTIONAL_MODULES
from rltap.testing.imports import SLIM_SURFACE

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).with_name("uv")
REPLY = "Hello from the instant engine."  # what rltap.testing.fakes.vllm's tokens decode to
PRINT_TOKENIZER_DIR = "from rltap.testing.models import cached_qwen_tokenizer_dir as d; print(d())"


class CheckFailed(Exception):
    pass


def build_venv(venv: Path, extras: str = "") -> Path:
    """`venv` with `./core` (with `extras`) installed from a clean copy (no build output left in
    the tree)."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([UV, "venv", "-q", "--python", sys.executable, venv], check=True)
    with tempfile.TemporaryDirectory(prefix="rltap-core-") as tmp:
        core = Path(tmp) / "core"
        shutil.copytree(
            ROOT / "core", core, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        )
        install = [UV, "pip", "install", "-q", "--python", python, "-c", ROOT / "constraints.txt"]
        subprocess.run([*install, "--reinstall-package", "rltap", f"{core}{extras}"], check=True)
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"
    if subprocess.run([python, "-c", probe], check=False).returncode != 0:
        msg = f"torch is importable in {venv}: something rltap requires pulled it in"
        raise CheckFailed(msg)
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(method: str, url: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def wait_healthy(url: str, process: subprocess.Popen[bytes], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            msg = f"{process.args!r} exited with {process.returncode} before {url} answered"
            raise CheckFailed(msg)
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.2)
    msg = f"{url} did not answer within {within:g} s"
    raise CheckFailed(msg)


@contextmanager
def running(command: list[str | Path], health_url: str) -> Iterator[None]:
    process = subprocess.Popen(command, cwd=ROOT)
    try:
        wait_healthy(health_url, process)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def chat_once(proxy: str, admin_key: str) -> str:
    status, session = http("POST", f"{proxy}/rl/start_session", {}, key=admin_key)
    if status != 200:
        msg = f"start_session answered {status}: {session}"
        raise CheckFailed(msg)
    body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
    status, reply = http("POST", f"{proxy}/v1/chat/completions", body, key=session["api_key"])
    if status != 200:
        msg = f"chat completion answered {status}: {reply}"
        raise CheckFailed(msg)
    http("POST", f"{proxy}/rl/end_session", {}, key=session["api_key"])
    request = {"session_id": session["session_id"]}
    status, export = http("POST", f"{proxy}/export_trajectories", request, key=admin_key)
    if status != 200 or [i["interaction_id"] for i in export["interactions"]] != [reply["id"]]:
        msg = f"export answered {status}: {export}"
        raise CheckFailed(msg)
    return str(reply["choices"][0]["message"]["content"])


def check(venv: Path) -> str:
    python = build_venv(venv, "[server,testing]")
    tokenizer = subprocess.run(
        [python, "-c", PRINT_TOKENIZER_DIR],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    engine_port, proxy_port = free_port(), free_port()
    engine = f"http://127.0.0.1:{engine_port}"
    proxy = f"http://127.0.0.1:{proxy_port}"
    admin_key = secrets.token_urlsafe(24)
    fake = [python, "-m", "rltap.testing.fakes.vllm", "--port", str(engine_port)]
    serve = [
        # `--admin-key=KEY`: a urlsafe key may start with "-", which argparse takes for a flag.
        venv / "bin" / "rltap", "serve", "--port", str(proxy_port), f"--admin-key={admin_key}",
        "--engine", "vllm", "--url", engine, "--tokenizer", tokenizer,
    ]  # fmt: skip
    with running(fake, f"{engine}/health"), running(serve, f"{proxy}/health"):
        content = chat_once(proxy, admin_key)
    if content != REPLY:
        msg = f"the reply was {content!r}, expected {REPLY!r}"
        raise CheckFailed(msg)
    return content


def check_slim(venv: Path) -> None:
    """The slim install (module docstring, 1)."""
    python = build_venv(venv)
    probe = (
        "import importlib, importlib.util, json, sys\n"
        f"optional = {sorted(OPTIONAL_MODULES)!r}\n"
        "found = [m for m in optional if importlib.util.find_spec(m) is not None]\n"
        f"for module in {SLIM_SURFACE!r}: importlib.import_module(module)\n"
        "print(json.dumps(found))\n"
    )
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        msg = f"the slim install cannot import its surface: {result.stderr.strip()}"
        raise CheckFailed(msg)
    if found := json.loads(result.stdout):
        msg = f"the slim install has {found} installed: something rltap requires pulled it in"
        raise CheckFailed(msg)
    serve = subprocess.run(
        [venv / "bin" / "rltap", "serve", "--engine", "vllm", "--url", "http://127.0.0.1:9"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if serve.returncode == 0 or "rltap[server]" not in serve.stderr:
        msg = f"`rltap serve` in the slim install did not name the server extra: {serve.stderr}"
        raise CheckFailed(msg)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-notorch")
    parser.add_argument("--slim-venv", type=Path, default=ROOT / ".venv-slim")
    args = parser.parse_args()
    started = time.perf_counter()
    try:
        check_slim(args.slim_venv.resolve())
        content = check(args.venv.resolve())
    except (CheckFailed, subprocess.CalledProcessError) as exc:
        print(f"no-torch: FAILED: {exc}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - started
    print(
        f"no-torch: pass: the slim install imports {', '.join(SLIM_SURFACE)} without the server "
        f"or ML stack; without torch, `rltap serve --engine vllm` answered {content!r} through "
        f"the fake vLLM ({seconds:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
