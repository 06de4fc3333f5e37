"""Inference engines: embedded transformers, vLLM and SGLang over HTTP, and a scripted fake.

Engine classes are imported on first use: each pulls in its own stack (torch, aiohttp).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rltap.engines.base import InferenceEngine
from rltap.engines.factory import ENGINE_KINDS, EngineKind, create_engine

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'rltap.engines' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
