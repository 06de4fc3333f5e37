"""AReaL 1.0.4's own `ArealOpenAI` and `rltap.areal`'s side by side, over the same fake AReaL
engine: a streamed reply comes in the same chunk shape, `chat_template_type` set after
construction takes effect on both, a concat conversation exports the same objects (linked to
the same parents, with the same rewards and tensors) and a second discount raises the same error
(what AReaL's tests of its agentic layer pin)."""

from __future__ import annotations

from typing import Any

import pytest
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


async def concat_tree(client: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """A branching concat conversation (root -> a -> a1, a2; root -> b), the last call cut at
    the token limit: the ids in call order, and the client's concat and individual exports."""
    client.chat_template_type = "concat"
    client.chat.completions.chat_template_type = "concat"
    create = client.chat.completions.create
    root = await create(messages=QUESTION)
    ask_a = [*QUESTION, root.choices[0].message, {"role": "user", "content": "And 3+3?"}]
    a = await create(messages=ask_a)
    a1 = await create(messages=[*ask_a, a.choices[0].message, {"role": "user", "content": "x"}])
    a2 = await create(messages=[*ask_a, a.choices[0].message, {"role": "user", "content": "y"}])
    ask_b = [*QUESTION, root.choices[0].message, {"role": "user", "content": "And 5+5?"}]
    b = await create(messages=ask_b, max_completion_tokens=2)
    assert b.choices[0].finish_reason == "length"
    client.set_reward(a1.id, 2.0)
    client.set_reward(b.id, 1.0)
    return (
        [c.id for c in (root, a, a1, a2, b)],
        client.export_interactions(style="concat"),
        client.export_interactions(style="individual"),
    )


def view(ids: list[str], exported: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each exported interaction in call order: its parent's position (by identity among the
    exported objects; "outside" for one not exported), its reward, and its training ids and
    loss mask."""
    objects = [exported.get(i) for i in ids]
    rows = []
    for node in objects:
        if node is None:
            continue
        parent = node.parent
        where = (
            None
            if parent is None
            else next((k for k, other in enumerate(objects) if other is parent), "outside")
        )
        tensors = node.to_tensor_dict()
        rows.append(
            (
                ids.index(node.interaction_id),
                where,
                node.reward,
                tensors["input_ids"].tolist(),
                tensors["loss_mask"].tolist(),
            )
        )
    return rows


async def test_a_concat_tree_exports_as_areals(tokenizer: Any) -> None:
    views, errors = [], []
    for client_class in (AReaLClient, ArealOpenAI):
        replies = ["4", "6", "x.", "y.", "ten, said twice"]
        engine = ScriptedArealEngine(tokenizer, replies, response_class=AReaLResponse)
        client = client_class(engine=engine, tokenizer=tokenizer, api_key="unused")
        ids, leaves, every = await concat_tree(client)
        views.append((view(ids, leaves), view(ids, every)))
        client.apply_reward_discount(turn_discount=0.9)
        with pytest.raises(RuntimeError) as raised:
            client.apply_reward_discount(turn_discount=0.9)
        errors.append(str(raised.value))
    areal, rltap = views
    assert rltap == areal
    assert [row[0] for row in areal[0]] == [2, 3, 4]  # the leaves: a1, a2, b
    assert [row[1] for row in areal[1]] == [None, 0, 1, 1, 0]  # parents, all exported
    assert errors[1] == errors[0] == "apply_reward_discount should only be called once."
