"""Fixtures shared by every test folder: the offline Qwen tokenizer, the tiny Qwen2 model, the
concat renderer of the tiny model's tokenizer, and Qwen3's own chat template.

The tokenizer and the model are built once into `$RLTAP_TEST_CACHE` (default
`~/.cache/rltap-test`) under a folder named by the builders' fingerprint, and reused by later runs;
concurrent pytest processes are safe (see `rltap.testing.models.cached_build`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from capture_run import recorded  # noqa: F401  (the store recorded once for tests/store, /view)

from rltap.chat.renderer import ChatRenderer
from rltap.testing.models import cached_qwen_tokenizer_dir, cached_tiny_model_dir

# Two shared cores: one torch thread is faster than two, and leaves a core to the others.
torch.set_num_threads(1)

# Fixtures that start real servers for many seconds: a test using one is `slow`, so `make check`
# leaves it to `make test`. The recording starts two `rltap serve` processes (30 s or more a
# pytest worker); the Ray tests' cluster starts in seconds and each test's actors load models.
SLOW_FIXTURES = {"recorded", "ray_address"}


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def qwen_tokenizer_dir() -> Path:
    """A folder with the Qwen2.5/Qwen3-compatible tokenizer and rltap's chat template."""
    return cached_qwen_tokenizer_dir()


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A folder with the tiny random Qwen2ForCausalLM (seed 0) and the Qwen tokenizer."""
    return cached_tiny_model_dir(seed=0)


@pytest.fixture(scope="session")
def qwen_tokenizer(qwen_tokenizer_dir: Path) -> Any:
    """The Qwen tokenizer, loaded once per session (loading takes about a second)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir))


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir: Path) -> Any:
    """The tiny model, loaded once; every engine of the session shares it (copy it to change it)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float32").eval()


@pytest.fixture(scope="session")
def renderer(tiny_model_dir: Path) -> ChatRenderer:
    """The concat renderer of the tiny model's folder (its generation_config's eos ids stop too)."""
    return ChatRenderer.from_pretrained(tiny_model_dir, mode="concat")


@pytest.fixture(scope="session")
def qwen3_chat_template() -> str:
    """Qwen3's published chat template, verbatim (tests/chat/data/README.md names its source)."""
    path = Path(__file__).parent / "chat" / "data" / "qwen3_chat_template.jinja"
    return path.read_text(encoding="utf-8").removesuffix("\n")
