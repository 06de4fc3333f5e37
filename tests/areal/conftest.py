"""AReaL's direct client over the fake AReaL engine (`rltap.testing.areal_engine`), with the real
offline Qwen tokenizer: no `areal` package, no inference server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from rltap.areal import ArealOpenAI
from rltap.testing.areal_engine import ScriptedArealEngine

ClientFactory = Callable[..., tuple[ArealOpenAI, ScriptedArealEngine]]


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
