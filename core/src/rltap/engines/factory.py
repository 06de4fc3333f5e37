"""Build an engine by name, the way `rltap serve --engine ...` does.

Each engine's module is imported only when that engine is built. The vLLM and SGLang engines
need nothing beyond `pip install rltap`; the transformers and scripted engines run the model
in-process and need torch, which the `rltap[embedded]` extra installs: without it, building one
fails with an ImportError that says so.
"""

from __future__ import annotations

from pathlib import Path

from rltap._lazy import require_module
from rltap.config.serve import ENGINE_KINDS, MAX_PREFILL_TOKENS, SERVER_ENGINES, EngineKind
from rltap.engines.base import InferenceEngine

__all__ = [
    "EMBEDDED_EXTRA",
    "ENGINE_KINDS",
    "SERVER_ENGINES",
    "EngineKind",
    "create_engine",
    "require_embedded",
]

EMBEDDED_EXTRA = "rltap[embedded]"


def require_embedded(what: str) -> None:
    """Raise an ImportError naming the extra to install when torch, which `what` needs, is not
    importable."""
    require_module("torch", EMBEDDED_EXTRA, what)


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
    max_prefill_tokens: int = MAX_PREFILL_TOKENS,
) -> InferenceEngine:
    """An engine of `kind`; each kind says which arguments it needs when one is missing.

    transformers: `model` (a local folder); vllm and sglang: `url`; scripted: `script`
    ("module:function") and `model` (the model that teacher-forces the logprobs).
    `max_prefill_tokens` is the transformers engine's batched-prefill budget.
    """
    if kind in SERVER_ENGINES:
        if not url:
            msg = f"the {kind} engine needs --url (the {kind} server's address)"
            raise ValueError(msg)
        if kind == "vllm":
            from rltap.engines.vllm import VLLMEngine

            return VLLMEngine(url, model=str(model) if model else None)
        from rltap.engines.sglang import SGLangEngine

        return SGLangEngine(url)
    if kind not in ENGINE_KINDS:
        msg = f"unknown engine {kind!r}; choose one of {', '.join(ENGINE_KINDS)}"
        raise ValueError(msg)
    if model is None:
        msg = f"the {kind} engine needs --model (a local model folder)"
        raise ValueError(msg)
    require_embedded(f"the {kind} engine")
    if kind == "transformers":
        from rltap.engines.transformers import TransformersEngine

        return TransformersEngine(
            str(model),
            tokenizer=str(tokenizer or model),
            num_threads=num_threads,
            dtype=dtype,
            device=device,
            max_prefill_tokens=max_prefill_tokens,
        )
    if not script:
        msg = "the scripted engine needs --script module:function"
        raise ValueError(msg)
    from rltap.engines.scripted import ScriptedEngine

    return ScriptedEngine(
        script, str(model), tokenizer=str(tokenizer or model), num_threads=num_threads
    )
