"""Inference engines: embedded transformers, vLLM and SGLang over HTTP, and a scripted fake.

The engines by name are `rltap.config.engines.ENGINES`; their classes are imported on first use
(each pulls in its own stack: torch, an HTTP client). The embedded ones (transformers, scripted)
need the `rltap[embedded]` extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rltap._lazy import lazy_getattr
from rltap.config.engines import ENGINES
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

# Every engine class of the registry, by its class name.
_LAZY = {entry.class_name: entry.module for entry in ENGINES.values()}
_EMBEDDED = frozenset(entry.class_name for entry in ENGINES.values() if not entry.server)
_lazy_getattr = lazy_getattr("rltap.engines", globals(), _LAZY)


def __getattr__(name: str) -> Any:
    if name in _EMBEDDED:
        require_embedded(f"rltap.engines.{name}")
    return _lazy_getattr(name)
