"""Build an engine by name, the way `rltap serve --engine ...` does."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from rltap.engines.base import InferenceEngine

__all__ = ["ENGINE_KINDS", "EngineKind", "create_engine"]

EngineKind = Literal["transformers", "vllm", "sglang", "scripted"]
ENGINE_KINDS: tuple[EngineKind, ...] = ("transformers", "vllm", "sglang", "scripted")


def create_engine(
    kind: EngineKind,
    *,
    model: str | Path | None = None,
    tokenizer: str | Path | None = None,
    url: str | None = None,
    script: str | None = None,
    num_threads: int | None = 1,
    dtype: str = "float32",
    device: str = "cpu",
) -> InferenceEngine:
    """An engine of `kind`; each kind says which arguments it needs when one is missing.

    transformers: `model` (a local folder); vllm and sglang: `url`; scripted: `script`
    ("module:function") and `model` (the model that teacher-forces the logprobs).
    """
    if kind in ("vllm", "sglang"):
        if not url:
            msg = f"the {kind} engine needs --url (the {kind} server's address)"
            raise ValueError(msg)
        if kind == "vllm":
            from rltap.engines.vllm import VLLMEngine

            return VLLMEngine(url, model=str(model) if model else None)
        from rltap.engines.sglang import SGLangEngine

        return SGLangEngine(url)
    if model is None:
        msg = f"the {kind} engine needs --model (a local model folder)"
        raise ValueError(msg)
    if kind == "transformers":
        from rltap.engines.transformers import TransformersEngine

        return TransformersEngine(
            str(model),
            tokenizer=str(tokenizer or model),
            num_threads=num_threads,
            dtype=dtype,
            device=device,
        )
    if kind == "scripted":
        if not script:
            msg = "the scripted engine needs --script module:function"
            raise ValueError(msg)
        from rltap.engines.scripted import ScriptedEngine

        return ScriptedEngine(
            script, str(model), tokenizer=str(tokenizer or model), num_threads=num_threads
        )
    msg = f"unknown engine {kind!r}; choose one of {', '.join(ENGINE_KINDS)}"
    raise ValueError(msg)
