"""AReaL's direct client over the fake AReaL engine (`rltap.testing.areal_engine`), or over rltap's
scripted engine, with the real offline Qwen tokenizer: no `areal` package, no inference server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from rltap.areal import ArealOpenAI
from rltap.engines.scripted import ScriptedEngine
from rltap.testing.areal_engine import ScriptedArealEngine

ClientFactory = Callable[..., tuple[ArealOpenAI, ScriptedArealEngine]]
EngineClientFactory = Callable[..., ArealOpenAI]


@pytest.fixture
async def areal_client(qwen_tokenizer: Any) -> AsyncIterator[ClientFactory]:
    """`make(replies, **areal_kwargs)` -> (an `ArealOpenAI` as AReaL builds it, its engine)."""
    clients: list[ArealOpenAI] = []

    def make(replies: Sequence[str], **kwargs: Any) -> tuple[ArealOpenAI, ScriptedArealEngine]:
        engine = ScriptedArealEngine(qwen_tokenizer, replies)
        client = ArealOpenAI(engine=engine, tokenizer=qwen_tokenizer, **kwargs)
        clients.append(client)
        return client, engine

    yield make
    for client in clients:
        await client.close()


@pytest.fixture(params=["areal-engine", "rltap-engine"])
async def engine_client(
    request: pytest.FixtureRequest, qwen_tokenizer: Any, tiny_model: Any
) -> AsyncIterator[EngineClientFactory]:
    """`make(replies, **areal_kwargs)` -> an `ArealOpenAI` answering `replies` in turn, over an
    AReaL engine (`ScriptedArealEngine`) or over rltap's own (`ScriptedEngine`, the tiny model
    scoring the replies), as AReaL's tests run the same client over either kind."""
    clients: list[ArealOpenAI] = []
    engines: list[ScriptedEngine] = []

    def make(replies: Sequence[str], **kwargs: Any) -> ArealOpenAI:
        engine: Any
        if request.param == "areal-engine":
            engine = ScriptedArealEngine(qwen_tokenizer, replies)
        else:
            script = iter(replies)
            engine = ScriptedEngine(
                lambda messages, tools, turn: next(script), tiny_model, tokenizer=qwen_tokenizer
            )
            engines.append(engine)
        clients.append(ArealOpenAI(engine=engine, tokenizer=qwen_tokenizer, **kwargs))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()
    for engine in engines:
        await engine.close()
