"""`create_engine` by name; an embedded engine without torch fails naming the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rltap.engines import SGLangEngine, VLLMEngine, create_engine

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
    engine = create_engine(kind, url="http://127.0.0.1:9/")  # type: ignore[arg-type]
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
        create_engine(**kwargs)  # type: ignore[arg-type]
