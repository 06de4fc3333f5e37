"""Fixtures shared by the chat tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def qwen_backend(qwen_tokenizer: Any) -> Any:
    """The Qwen tokenizer's Rust `tokenizers.Tokenizer`."""
    return qwen_tokenizer.backend_tokenizer
