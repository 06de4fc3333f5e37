"""`/export_trajectories` with style "tree": a branching session's token trie over HTTP, decoded
back equal to the pack the session's cache makes in process; the areal format refuses it."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import openai

from rltap.client import OpenAIProxyClient, interactions_from_export, tree_from_export
from rltap.record.pack_io import PACK_ARRAYS
from rltap.testing.proxy import RunningProxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]


def numbered(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    return f"Reply {next(COUNTER)} at turn {turn}"


COUNTER = itertools.count()


async def test_a_branching_session_exports_as_one_trie(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(numbered)
    client_session = OpenAIProxyClient(proxy.url, proxy.admin_key, http_client=proxy.http)
    await client_session.start_session()
    client = openai.AsyncOpenAI(
        base_url=client_session.base_url, api_key=client_session.api_key, http_client=proxy.http
    )
    messages: list[Any] = [{"role": "system", "content": "Be brief."}]
    messages.append({"role": "user", "content": "start"})
    root = await client.chat.completions.create(model="tiny", messages=messages)
    messages += [root.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "user", "content": "two ways"}]
    fork = await client.chat.completions.create(model="tiny", messages=messages, n=2)
    chosen = fork.choices[1].message.model_dump(exclude_none=True)
    await client.chat.completions.create(
        model="tiny", messages=[*messages, chosen, {"role": "user", "content": "go on"}]
    )
    await client_session.set_last_reward(1.0)
    await client_session.end_session()
    assert client_session.session_id is not None

    refused = await proxy.admin(
        "/export_trajectories",
        {"session_id": client_session.session_id, "style": "tree", "format": "areal"},
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "style"

    cache = proxy.state.store.get(client_session.session_id).session.cache
    in_process = cache.export_tree(reward_discount=0.9)
    individual = cache.export_interactions("individual", reward_discount=0.9)
    body = await client_session.export_trajectories(discount=0.9, style="tree")
    pack = tree_from_export(body)

    for name in PACK_ARRAYS:
        assert getattr(pack, name).dtype == getattr(in_process, name).dtype, name
        assert getattr(pack, name).tolist() == getattr(in_process, name).tolist(), name
    assert pack.interaction_ids == in_process.interaction_ids == list(individual)
    assert [(x.interaction_id, x.reward, x.path.tolist()) for x in pack.leaves] == [
        (x.interaction_id, x.reward, x.path.tolist()) for x in in_process.leaves
    ]
    assert len(pack.leaves) == 2  # the unchosen sample, and the continuation
    # The root's prompt and reply appear once, though all four calls hold them.
    assert len(pack) < sum(len(node.token_sequence().input_ids) for node in individual.values())
    # The interactions come back as style individual's, cut out of the pack.
    rebuilt = interactions_from_export(body)
    for interaction_id, node in individual.items():
        ours, theirs = rebuilt[interaction_id].to_tensor_dict(), node.to_tensor_dict()
        assert {k: v.tolist() for k, v in ours.items()} == {
            k: v.tolist() for k, v in theirs.items()
        }
        assert rebuilt[interaction_id].parent_id == node.parent_id
    assert body["interactions"][0]["messages"] == messages[:2]
    assert "tensors" not in body["interactions"][0]
