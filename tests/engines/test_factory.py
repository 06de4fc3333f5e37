"""`create_engine` by name; an embedded engine without torch fails naming the extra; the
engine names, the server engines, `--engine`'s choices and the factory are one registry."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

import rltap.engines
from rltap.config import ConfigError, EngineConfig
from rltap.config.engines import ENGINES, EngineEntry
from rltap.config.flags import settings
from rltap.config.serve import SERVER_ENGINES
from rltap.engines import SGLangEngine, VLLMEngine, create_engine
from rltap.engines.factory import engine_class

# torch made unimportable the way a `pip install rltap` without the extra leaves it.
WITHOUT_TORCH = textwrap.dedent(
    """
    import sys

    sys.modules["torch"] = None
    import rltap.cli.commands, rltap.proxy.app, rltap.engines.vllm, rltap.engines.sglang
    from rltap.engines import create_engine

    create_engine("vllm", url="http://127.0.0.1:9")
    create_engine("sglang", url="http://127.0.0.1:9")
    for kind in ("transformers", "scripted"):
        try:
            create_engine(kind, model="model-dir", script="pkg:fn")
        except ImportError as exc:
            print(kind, exc)
    try:
        from rltap.engines import TransformersEngine
    except ImportError as exc:
        print("TransformersEngine", exc)
    """
)


def test_the_http_engines_build_without_torch_and_the_embedded_ones_name_the_extra() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["transformers", "scripted", "TransformersEngine"]
    for line in lines:
        assert "needs torch, which the rltap[embedded] extra installs" in line
        assert "pip install 'rltap[embedded]'" in line


@pytest.mark.parametrize(
    ("kind", "engine_type"),
    [
        pytest.param("vllm", VLLMEngine, id="vllm"),
        pytest.param("sglang", SGLangEngine, id="sglang"),
    ],
)
def test_an_http_engine_is_built_from_its_url(kind: str, engine_type: type) -> None:
    engine = create_engine(kind, url="http://127.0.0.1:9/")
    assert isinstance(engine, engine_type)
    assert engine.url == "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"kind": "vllm"}, "needs --url", id="vllm-without-url"),
        pytest.param({"kind": "transformers"}, "needs --model", id="transformers-without-model"),
        pytest.param({"kind": "scripted", "model": "m"}, "needs --script", id="scripted-no-script"),
        pytest.param({"kind": "llama"}, "unknown engine", id="unknown"),
    ],
)
def test_a_missing_argument_is_named(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_engine(**kwargs)


def test_an_engine_config_builds_its_engine_and_keywords_change_its_fields() -> None:
    config = EngineConfig(engine="vllm", url="http://127.0.0.1:9", model="served")
    engine = create_engine(config, url="http://127.0.0.1:10/v1")
    assert isinstance(engine, VLLMEngine)
    assert (engine.url, engine.model) == ("http://127.0.0.1:10", "served")


class RecordingEngine:
    """An engine added the registry's way, for the test below: it keeps what it was given."""

    def __init__(self, url: str, model: str | None = None, *, timeout: float = 1.0) -> None:
        self.url, self.model, self.timeout = url, model, timeout


def test_the_engine_flag_the_server_engines_and_the_factory_come_from_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (engine_flag,) = [s for s in settings(EngineConfig) if s.flag == "--engine"]
    assert engine_flag.kwargs["choices"] == tuple(ENGINES)
    for name, entry in ENGINES.items():
        assert f"{name}: {entry.about}" in engine_flag.kwargs["help"]
    assert tuple(name for name, entry in ENGINES.items() if entry.server) == SERVER_ENGINES
    for entry in ENGINES.values():
        assert getattr(rltap.engines, entry.class_name) is engine_class(entry)

    # A new engine is its class and one line: the factory gives it the settings its
    # constructor names, and asks for those it requires.
    target = f"{__name__}:{RecordingEngine.__name__}"
    monkeypatch.setitem(ENGINES, "recording", EngineEntry(target, server=True, about="a test"))
    engine: Any = create_engine("recording", url="http://127.0.0.1:9", script="unused:f")
    assert isinstance(engine, RecordingEngine)
    assert (engine.url, engine.model, engine.timeout) == ("http://127.0.0.1:9", None, 1.0)
    with pytest.raises(ConfigError, match="the recording engine needs --url: engine server"):
        create_engine("recording", model="m")
