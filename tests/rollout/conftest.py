"""A real proxy (uvicorn on 127.0.0.1) in front of the scripted engine and the tiny model.

The agents these tests run live in `agents/chat_agents.py` and are named by file path
(`AGENTS_FILE:Name`), the way `rltap rollout` names them: subprocess workers ("spawn") load that
file again by the same module name, so pickled agents resolve there too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.engines.scripted import Script, ScriptedEngine
from rltap.testing.proxy import RunningProxy, start_test_proxy
from rltap.testing.scripts import echo

AGENTS_FILE = Path(__file__).parent / "agents" / "chat_agents.py"
AgentSpec = Callable[[str], str]


@pytest.fixture(scope="session")
def agent_spec() -> AgentSpec:
    """`path/to/chat_agents.py:Name`, what a user passes to resolve_workflow or `rltap rollout`."""

    def spec(name: str) -> str:
        return f"{AGENTS_FILE}:{name}"

    return spec


@pytest.fixture
def scripted_engine(tiny_model: Any, renderer: ChatRenderer) -> Callable[..., ScriptedEngine]:
    """Scripted engines over the shared tiny model (echo script unless told otherwise)."""

    def make(script: Script = echo) -> ScriptedEngine:
        return ScriptedEngine(script, tiny_model, tokenizer=renderer.tokenizer)

    return make


@pytest.fixture
async def proxy(
    scripted_engine: Callable[..., ScriptedEngine], renderer: ChatRenderer
) -> AsyncIterator[RunningProxy]:
    """A proxy answering with the echo script: `Turn N: you said: <last user message>`."""
    config = ServeConfig(
        chat=ChatConfig(max_context=2048, default_max_tokens=256),
        limits=LimitsConfig(capacity=16, model_name="tiny"),
    )
    async with start_test_proxy(scripted_engine(), renderer, config) as running:
        yield running
