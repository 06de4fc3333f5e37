"""Inference engines: embedded transformers, vLLM and SGLang over HTTP, and a scripted fake."""

from __future__ import annotations

from rltap.engines.base import InferenceEngine

__all__ = ["InferenceEngine"]
