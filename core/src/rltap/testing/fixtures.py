"""Pytest fixtures for a framework's tests: a real proxy on 127.0.0.1 in front of the scripted
engine and the tiny model, and no variable through which an agent could reach a real vendor or
upload traces.

Every framework's tests (an adapter's, or those of a framework that needs none) use them with one
line in their conftest.py:

    pytest_plugins = ["rltap.testing.fixtures"]
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from rltap.testing.harness import ProxyFactory, scripted_proxies
from rltap.testing.proxy import RunningProxy

__all__ = ["VENDOR_ENV", "make_proxy", "no_vendor_env", "proxy"]

# Where frameworks read a vendor's key or address, or switch on tracing and telemetry.
VENDOR_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "ANTHROPIC_API_KEY",
    "LANGSMITH_API_KEY",
    "LANGSMITH_TRACING",
    "LANGCHAIN_API_KEY",
    "LANGCHAIN_TRACING_V2",
    "LOGFIRE_TOKEN",
    "AGNO_API_KEY",
    "HF_TOKEN",
)
# Every variable of these tracers (keys, endpoints, projects).
_TRACING_PREFIXES = ("LANGSMITH_", "LANGCHAIN_")
# Off switches the frameworks document for their telemetry.
_TELEMETRY_OFF = {
    "AGNO_TELEMETRY": "false",
    "HAYSTACK_TELEMETRY_ENABLED": "False",
    "AUTOGEN_TELEMETRY": "false",
    "ANONYMIZED_TELEMETRY": "False",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
# Some frameworks read their switch once, when imported (Haystack): before any test module is.
for _name, _value in _TELEMETRY_OFF.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture(autouse=True)
def no_vendor_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    for name in [*VENDOR_ENV, *(n for n in os.environ if n.startswith(_TRACING_PREFIXES))]:
        monkeypatch.delenv(name, raising=False)
    for name, value in _TELEMETRY_OFF.items():
        monkeypatch.setenv(name, value)
    # DSPy caches replies under the home folder by default: a test must see the proxy's.
    monkeypatch.setenv("DSPY_CACHEDIR", str(tmp_path_factory.mktemp("dspy-cache")))


@pytest.fixture
async def make_proxy() -> AsyncIterator[ProxyFactory]:
    """Start scripted proxies (`make_proxy(script, **engine_options)`); all stop at teardown."""
    async with scripted_proxies() as start:
        yield start


@pytest.fixture
async def proxy(make_proxy: ProxyFactory) -> RunningProxy:
    """A proxy running `rltap.testing.scripts.tool_loop`."""
    running: RunningProxy = await make_proxy()
    return running
