"""What users and integrations test with: offline tokenizer and tiny-model builders, scripts
for the scripted engine, a fake AReaL engine, and a real proxy on 127.0.0.1."""

from __future__ import annotations

from rltap.testing.areal_engine import ScriptedArealEngine
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
from rltap.testing.proxy import TEST_ADMIN_KEY, RunningProxy, start_test_proxy
from rltap.testing.scripts import FINAL_PREFIX, arguments_for, echo, tool_loop

__all__ = [
    "BUILDER_VERSION",
    "FINAL_PREFIX",
    "QWEN_ADDED_TOKENS",
    "QWEN_PRETOKENIZE_REGEX",
    "QWEN_VOCAB_SIZE",
    "TEST_ADMIN_KEY",
    "RunningProxy",
    "ScriptedArealEngine",
    "arguments_for",
    "build_qwen_tokenizer",
    "build_tiny_model",
    "builder_fingerprint",
    "cached_build",
    "cached_qwen_tokenizer_dir",
    "cached_tiny_model_dir",
    "default_cache_dir",
    "echo",
    "start_test_proxy",
    "tool_loop",
]
