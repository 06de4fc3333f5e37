"""What users and integrations test with: offline tokenizer and tiny-model builders."""

from __future__ import annotations

from rltap.testing.models import (
    BUILDER_VERSION,
    QWEN_ADDED_TOKENS,
    QWEN_PRETOKENIZE_REGEX,
    QWEN_VOCAB_SIZE,
    build_qwen_tokenizer,
    build_tiny_model,
    builder_fingerprint,
    cached_build,
    cached_qwen_tokenizer_dir,
    cached_tiny_model_dir,
    default_cache_dir,
)

__all__ = [
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
