"""The tiny model, its tokenizer and renderer, for `rltap.areal` next to AReaL 1.0.4 installed.

Nothing here may reach a vendor: the OpenAI variables are unset for every test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from rltap.chat.renderer import ChatRenderer
from rltap.testing import cached_tiny_model_dir

# Two shared cores: one torch thread is faster than two, and leaves a core to the others.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_vendor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return cached_tiny_model_dir(seed=0)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float32").eval()


@pytest.fixture(scope="session")
def renderer(tiny_model_dir: Path) -> ChatRenderer:
    return ChatRenderer.from_pretrained(tiny_model_dir, mode="concat")


@pytest.fixture(scope="session")
def tokenizer(renderer: ChatRenderer) -> Any:
    return renderer.tokenizer
