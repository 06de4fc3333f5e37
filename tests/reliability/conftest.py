"""Fixtures of the reliability suite: the Qwen renderer, instant engines and in-process proxies.

Proxies here are real uvicorn servers on 127.0.0.1 (`rltap.testing.start_test_proxy`) in front of
an engine that answers at once, so what is measured and checked is the proxy's own behaviour.
The load and restart tests run the proxy in a process of its own (`bench/soak.py serve`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from reliability_support import REPLY, HeldEngine, MakeProxy, proxy_config

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import LimitsConfig
from rltap.engines.base import InferenceEngine
from rltap.testing.proxy import RunningProxy, start_test_proxy


@pytest.fixture(scope="session")
def renderer(qwen_tokenizer_dir: Path) -> ChatRenderer:
    """The Qwen tokenizer's own renderer, not the tiny model's (tests/conftest.py): no model here,
    and so no generation_config whose eos ids would stop replies too."""
    return ChatRenderer.from_pretrained(qwen_tokenizer_dir, mode="concat")


@pytest.fixture
def held_engine(renderer: ChatRenderer) -> HeldEngine:
    """Answers at once, except calls marked HOLD or TRICKLE (see reliability_support)."""
    reply_ids = renderer.tokenizer.encode(REPLY, add_special_tokens=False)
    return HeldEngine(reply_ids, renderer.end_of_turn_ids[-1])


@pytest.fixture
async def make_proxy(renderer: ChatRenderer, held_engine: HeldEngine) -> AsyncIterator[MakeProxy]:
    """Start proxies (default engine: `held_engine`); all stop at teardown."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(
            engine: InferenceEngine | None = None,
            *,
            limits: LimitsConfig | None = None,
        ) -> RunningProxy:
            config = proxy_config(limits)
            running: RunningProxy = await stack.enter_async_context(
                start_test_proxy(engine or held_engine, renderer, config)
            )
            return running

        yield start
        held_engine.release()  # calls still held must not keep the server from stopping


@pytest.fixture
async def proxy(make_proxy: MakeProxy) -> RunningProxy:
    running: RunningProxy = await make_proxy()
    return running
