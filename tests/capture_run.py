"""A capture store recorded by a real `rltap serve`, killed with SIGKILL mid-run, then started
again on it (the `recorded` fixture, registered by tests/conftest.py; the store, export and
viewer tests share the one recording).

Sessions: `ended` (a three-call chain, rewarded and ended), `open` (two calls, a reward by id and
a refused call; still active at the kill), `siblings` (an n=2 call and a follow-up; ended).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

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
        self.log = store.with_name(f"serve-{self.port}.log")
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log)
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

    def output(self) -> str:
        """What the process printed so far."""
        return self.log.read_text()

    def kill(self) -> None:
        """SIGKILL: no shutdown code of the proxy runs."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@dataclass
class RecordedSession:
    session_id: str
    key: str
    task_id: str
    # Interaction ids as the replies named them, and each reply's token logprobs.
    replies: list[str] = field(default_factory=list)
    logprobs: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Recorded:
    store: Path
    sessions: dict[str, RecordedSession]
    restarted: ServeProcess


def _chat(
    proxy: ServeProcess, session: RecordedSession, messages: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    body = {"model": "tiny", "messages": messages, "logprobs": True, **extra}
    reply = proxy.session("/v1/chat/completions", session.key, body)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    session.replies.append(answer["id"])
    choice = answer["choices"][0]
    session.logprobs[answer["id"]] = [item["logprob"] for item in choice["logprobs"]["content"]]
    return answer


def _conversation(proxy: ServeProcess, session: RecordedSession, turns: int) -> None:
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        # The task, not the random session id: the echoed replies' token counts are the same
        # in every run, and apart (the viewer's sort by tokens is checked on them: siblings,
        # then open, then ended).
        content = f"turn {turn} of the {session.task_id} session, in a few words"
        messages.append({"role": "user", "content": content})
        answer = _chat(proxy, session, messages)
        messages.append(answer["choices"][0]["message"])


def _start(proxy: ServeProcess, task_id: str) -> RecordedSession:
    started = proxy.admin("/rl/start_session", {"task_id": task_id}).json()
    return RecordedSession(started["session_id"], started["api_key"], task_id)


def _record(proxy: ServeProcess) -> dict[str, RecordedSession]:
    ended, open_, siblings = (_start(proxy, task) for task in ("ended", "open", "siblings"))
    _conversation(proxy, ended, 3)
    assert proxy.session("/rl/set_reward", ended.key, {"reward": 1.0}).status_code == 200
    assert proxy.session("/rl/end_session", ended.key, {}).status_code == 200

    _conversation(proxy, open_, 2)
    first = {"interaction_id": open_.replies[0], "reward": 0.5}
    assert proxy.session("/rl/set_reward", open_.key, first).status_code == 200
    too_long = [{"role": "user", "content": "word " * 9000}]
    body = {"model": "tiny", "messages": too_long}
    assert proxy.session("/v1/chat/completions", open_.key, body).status_code == 400

    question = [{"role": "user", "content": "pick one"}]
    pair = _chat(proxy, siblings, question, n=2)
    follow = [*question, pair["choices"][1]["message"], {"role": "user", "content": "why?"}]
    _chat(proxy, siblings, follow)
    assert proxy.session("/rl/set_reward", siblings.key, {"reward": 2.0}).status_code == 200
    assert proxy.session("/rl/end_session", siblings.key, {}).status_code == 200
    return {"ended": ended, "open": open_, "siblings": siblings}


@pytest.fixture(scope="session")
def recorded(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    store = tmp_path_factory.mktemp("store") / "capture.sqlite"
    first = ServeProcess(tiny_model_dir, store)
    try:
        sessions = _record(first)
    finally:
        first.kill()
    restarted = ServeProcess(tiny_model_dir, store)
    try:
        yield Recorded(store, sessions, restarted)
    finally:
        restarted.stop()
