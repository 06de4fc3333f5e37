"""A real rltap proxy (uvicorn on 127.0.0.1) in front of the scripted engine and the tiny model.

The engine runs `rltap.testing.scripts.tool_loop` unless a test names another script: a real tool
call on the first turn when tools are offered, then `Final answer: <tool result>`. The proxies
come from `rltap.testing.harness`, which the standard suite and the matrix use too (one tiny
model per process).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import torch

from rltap.testing import RunningProxy
from rltap.testing.harness import ProxyFactory, scripted_proxies

# Two shared cores: one torch thread is faster than two, and leaves a core to the others.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def no_vendor_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach OpenAI or LangSmith: their keys are never set here."""
    for name in list(os.environ):
        if name == "OPENAI_API_KEY" or name.startswith("LANGSMITH_"):
            monkeypatch.delenv(name)


@pytest.fixture
async def make_proxy() -> AsyncIterator[ProxyFactory]:
    """Start proxies with a given script and engine options; all stop at teardown."""
    async with scripted_proxies() as start:
        yield start


@pytest.fixture
async def proxy(make_proxy: ProxyFactory) -> RunningProxy:
    """A proxy running the tool-loop script."""
    running: RunningProxy = await make_proxy()
    return running
