"""A real rltap proxy (uvicorn on 127.0.0.1) in front of the scripted engine and the tiny model.

The proxies come from `rltap.testing.harness.scripted_proxy`, as in the standard suite and the
matrix, so the whole run loads the tiny model once. The `tool_loop` script answers a call that
offers tools with a real tool call and the tool's result with `Final answer: <result>`; any other
call with `Turn <n>: you said: <last user text>`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rltap.testing import RunningProxy, cached_tiny_model_dir
from rltap.testing.harness import ProxyFactory, scripted_proxies


@pytest.fixture(autouse=True)
def no_vendor_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here may reach a vendor: no OpenAI key or URL, no LangSmith tracing."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LANGSMITH_API_KEY", "LANGSMITH_TRACING"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return cached_tiny_model_dir()


@pytest.fixture
async def make_proxy() -> AsyncIterator[ProxyFactory]:
    """Start proxies running a script (default `tool_loop`); all stop at teardown."""
    async with scripted_proxies() as start:
        yield start


@pytest.fixture
async def proxy(make_proxy: ProxyFactory) -> RunningProxy:
    """A proxy running the tool-loop script."""
    running: RunningProxy = await make_proxy()
    return running
