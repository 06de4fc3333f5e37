"""A real proxy on 127.0.0.1 (uvicorn) in front of the scripted engine and the tiny model."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx2
import pytest

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.engines.base import InferenceEngine
from rltap.engines.scripted import ScriptedEngine
from rltap.testing.proxy import RunningProxy, start_test_proxy
from rltap.testing.scripts import tool_loop

Script = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None, int], str]


ProxyFactory = Callable[..., Any]
# The proxies' limits unless a test gives its own.
LIMITS = LimitsConfig(capacity=64, max_body_bytes=1_000_000, model_name="tiny")


@pytest.fixture
async def make_proxy(
    tiny_model: Any, tiny_model_dir: Path, renderer: ChatRenderer
) -> AsyncIterator[ProxyFactory]:
    """Start proxies with a given script, engine options, chat settings (`chat_options` over
    these defaults), limits and renderer (default: the tiny model's), or in front of a given
    `engine` (closed at teardown); all stop at teardown."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(
            script: Script = tool_loop,
            *,
            limits: LimitsConfig | None = None,
            max_context: int = 2048,
            reasoning_parser: str | None = "qwen3",
            chat_options: Mapping[str, Any] | None = None,
            chat_renderer: ChatRenderer | None = None,
            engine: InferenceEngine | None = None,
            **engine_options: Any,
        ) -> RunningProxy:
            if engine is None:
                engine = ScriptedEngine(
                    script, tiny_model, tokenizer=renderer.tokenizer, **engine_options
                )
            else:
                stack.push_async_callback(engine.close)
            chat = {
                "max_context": max_context,
                "default_max_tokens": 256,
                "reasoning_parser": reasoning_parser,
                **(chat_options or {}),
            }
            config = ServeConfig(chat=ChatConfig(**chat), limits=limits or LIMITS)
            running: RunningProxy = await stack.enter_async_context(
                start_test_proxy(engine, chat_renderer or renderer, config)
            )
            return running

        yield start


@pytest.fixture
async def http2() -> AsyncIterator[httpx2.AsyncClient]:
    """An httpx2 client (the anthropic SDK's HTTP library) for `clients.anthropic_client`."""
    async with httpx2.AsyncClient(timeout=120) as client:
        yield client


@pytest.fixture
async def proxy(make_proxy: ProxyFactory) -> RunningProxy:
    """A proxy running the tool-loop script."""
    running: RunningProxy = await make_proxy()
    return running
