"""LlamaIndex against a scripted rltap proxy: the shared fixtures (`make_proxy`, no vendor
variables, telemetry off) and a token counter that needs no download.

LlamaIndex counts tokens (agent memory limits) with tiktoken by default, which downloads its
encodings; offline it is given the served model's own tokenizer through `Settings.tokenizer`,
the documented switch.
"""

from __future__ import annotations

import pytest
from llama_index.core import Settings

from rltap.testing.harness import tiny_renderer

pytest_plugins = ["rltap.testing.fixtures"]


@pytest.fixture(autouse=True, scope="session")
def model_tokenizer() -> None:
    Settings.tokenizer = tiny_renderer().tokenizer
