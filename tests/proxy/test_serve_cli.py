"""`rltap serve` as a user runs it: a real process, a generated admin key, a real client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RLTAP_ADMIN_KEY"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("admin", id="known"),
        pytest.param("", id="empty"),
        pytest.param("short", id="short"),
    ],
)
def test_a_weak_admin_key_is_refused_beyond_loopback(tiny_model_dir: Path, key: str) -> None:
    command = [
        sys.executable, "-m", "rltap.cli", "serve", "--host", "0.0.0.0", "--admin-key", key,
        "--engine", "scripted", "--script", "rltap.testing.scripts:echo",
        "--model", str(tiny_model_dir),
    ]  # fmt: skip
    env = _env()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "refusing to listen on 0.0.0.0" in result.stderr


@pytest.mark.slow
def test_serve_prints_a_generated_key_and_answers(tiny_model_dir: Path) -> None:
    port = _free_port()
    command = [
        sys.executable, "-m", "rltap.cli", "serve", "--port", str(port),
        "--engine", "scripted", "--script", "rltap.testing.scripts:echo",
        "--model", str(tiny_model_dir), "--model-name", "tiny",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("rltap admin key (generated): ")
        admin_key = first.split(": ", 1)[1].strip()
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "rltap serve did not come up"
                time.sleep(0.2)
        admin = {"authorization": f"Bearer {admin_key}"}
        session = httpx.post(f"{url}/rl/start_session", json={}, headers=admin).json()
        reply = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {session['api_key']}"},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "Turn 0: you said: hi"
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize(
    ("flags", "strict", "drop"),
    [
        pytest.param([], False, False, id="defaults"),
        pytest.param(["--strict-max-tokens"], True, False, id="strict-max-tokens"),
        pytest.param(["--drop-unsupported-content"], False, True, id="drop-unsupported"),
    ],
)
def test_serve_flags_reach_every_session(
    tiny_model_dir: Path, flags: list[str], strict: bool, drop: bool
) -> None:
    from rltap.cli.commands import build_parser
    from rltap.config import ServerConfig, from_namespace
    from rltap.proxy import ServeSetup

    args = build_parser().parse_args(
        ["serve", "--engine", "scripted", "--script", "rltap.testing.scripts:echo",
         "--model", str(tiny_model_dir), *flags]
    )  # fmt: skip
    config = from_namespace(ServerConfig, args).serve
    app = ServeSetup.load(config).app("k" * 32)
    store = app.state.rltap.store
    session_id, _ = store.start()
    chat = store.get(session_id).session.chat
    assert (chat.strict_max_tokens, chat.drop_unsupported_content) == (strict, drop)
    # --max-context unset: the model's own context, from its config.json.
    model_config = json.loads((tiny_model_dir / "config.json").read_text())
    assert chat.max_context == model_config["max_position_embeddings"]


def test_a_loaded_tokenizer_is_the_renderers_own(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    from rltap.config import EngineConfig, ServeConfig
    from rltap.proxy import ServeSetup

    script = "rltap.testing.scripts:echo"
    config = ServeConfig(
        engine=EngineConfig(engine="scripted", script=script, model=str(tiny_model_dir))
    )
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    shared = ServeSetup.load(config, tokenizer=tokenizer).renderer
    loaded = ServeSetup.load(config).renderer
    assert shared.tokenizer is tokenizer
    assert loaded.tokenizer is not tokenizer
    assert shared.end_of_turn_ids == loaded.end_of_turn_ids
    assert shared.stop_token_ids == loaded.stop_token_ids  # generation_config.json's still read


@pytest.mark.parametrize(
    ("chat", "flag"),
    [
        pytest.param({"tool_parser": "no-such-parser"}, "--tool-parser", id="tool"),
        pytest.param({"reasoning_parser": "no-such-parser"}, "--reasoning-parser", id="reasoning"),
    ],
)
def test_an_unknown_parser_is_refused_when_the_proxy_is_built(
    tiny_model: Any, renderer: Any, chat: dict[str, str], flag: str
) -> None:
    from rltap.config import ChatConfig, ConfigError, ServeConfig
    from rltap.engines.scripted import ScriptedEngine
    from rltap.proxy import create_app
    from rltap.testing.scripts import echo

    engine = ScriptedEngine(echo, tiny_model, tokenizer=renderer.tokenizer)
    config = ServeConfig(chat=ChatConfig(**chat))
    with pytest.raises(ConfigError, match=f"{flag}: unknown .* 'no-such-parser'; known: "):
        create_app(engine, renderer, config, admin_key="k" * 32)
