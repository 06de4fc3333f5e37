"""A real rltap proxy (uvicorn on 127.0.0.1) in front of the scripted engine and the tiny model.

The proxies come from `rltap.testing.harness.scripted_proxy`, as in the standard suite and the
matrix, so the whole run loads the tiny model once. The `tool_loop` script answers a call that
offers tools with a real tool call and the tool's result with `Final answer: <result>`; any other
call with `Turn <n>: you said: <last user text>`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rltap.testing import cached_tiny_model_dir

# `proxy`, `make_proxy`, and no vendor key, address or tracing switch in the environment.
pytest_plugins = ["rltap.testing.fixtures"]


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return cached_tiny_model_dir()
