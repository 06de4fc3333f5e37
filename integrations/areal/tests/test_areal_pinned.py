"""AReaL 1.0.4's own `ArealOpenAI` and `rltap.areal`'s side by side, over the same fake AReaL
engine: a streamed reply comes in the same chunk shape, and `chat_template_type` set after
construction takes effect on both (what AReaL's tests of its agentic layer pin)."""

from __future__ import annotations

from typing import Any

from areal.api.io_struct import ModelResponse as AReaLResponse
from areal.experimental.openai import ArealOpenAI as AReaLClient

from rltap.areal import ArealOpenAI
from rltap.testing.areal_engine import ScriptedArealEngine

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def shape(chunk: Any) -> tuple[Any, ...]:
    """What a chunk carries, without its ids, times and model name."""
    (choice,) = chunk.choices
    delta = choice.delta.model_dump(exclude_none=True)
    usage = None if chunk.usage is None else chunk.usage.model_dump(exclude_none=True)
    return tuple(sorted(delta.items())), choice.finish_reason, usage


async def streamed(client: Any) -> list[tuple[Any, ...]]:
    stream = await client.chat.completions.create(messages=QUESTION, stream=True)
    return [shape(chunk) async for chunk in stream]


async def test_a_stream_has_areals_chunk_shape(tokenizer: Any) -> None:
    shapes = []
    for client_class in (AReaLClient, ArealOpenAI):
        engine = ScriptedArealEngine(tokenizer, ["four"], response_class=AReaLResponse)
        shapes.append(
            await streamed(client_class(engine=engine, tokenizer=tokenizer, api_key="unused"))
        )
    areal, rltap = shapes
    assert rltap == areal
    assert areal[-1][2] is not None  # usage on the last chunk


async def test_chat_template_type_set_after_construction(tokenizer: Any) -> None:
    leaves = []
    for client_class in (AReaLClient, ArealOpenAI):
        engine = ScriptedArealEngine(tokenizer, ["4", "6"], response_class=AReaLResponse)
        client = client_class(engine=engine, tokenizer=tokenizer, api_key="unused")
        client.chat_template_type = "concat"
        client.chat.completions.chat_template_type = "concat"
        first = await client.chat.completions.create(messages=QUESTION)
        follow = [*QUESTION, first.choices[0].message, {"role": "user", "content": "And 3+3?"}]
        second = await client.chat.completions.create(messages=follow)
        exported = client.export_interactions(style="concat")
        assert list(exported) == [second.id]
        leaves.append(exported[second.id].to_tensor_dict()["input_ids"].tolist())
    assert leaves[0] == leaves[1]
