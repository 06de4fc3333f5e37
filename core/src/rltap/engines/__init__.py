"""Inference engines: embedded transformers, vLLM and SGLang over HTTP, and a scripted fake.

Engine classes are imported on first use: each pulls in its own stack (torch, an HTTP client).
The embedded ones (transformers, scripted) need the `rltap[embedded]` extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rltap._lazy import lazy_getattr
from rltap.engines.base import InferenceEngine
from rltap.engines.factory import ENGINE_KINDS, EngineKind, create_engine, require_embedded

if TYPE_CHECKING:
    from rltap.engines.scripted import ScriptedEngine
    from rltap.engines.sglang import SGLangEngine
    from rltap.engines.transformers import TransformersEngine
    from rltap.engines.vllm import VLLMEngine

__all__ = [
    "ENGINE_KINDS",
    "EngineKind",
    "InferenceEngine",
    "SGLangEngine",
    "ScriptedEngine",
    "TransformersEngine",
    "VLLMEngine",
    "create_engine",
]

_LAZY = {
    "ScriptedEngine": "rltap.engines.scripted",
    "SGLangEngine": "rltap.engines.sglang",
    "TransformersEngine": "rltap.engines.transformers",
    "VLLMEngine": "rltap.engines.vllm",
}
_EMBEDDED = frozenset({"ScriptedEngine", "TransformersEngine"})
_lazy_getattr = lazy_getattr("rltap.engines", globals(), _LAZY)


def __getattr__(name: str) -> Any:
    if name in _EMBEDDED:
        require_embedded(f"rltap.engines.{name}")
    return _lazy_getattr(name)
