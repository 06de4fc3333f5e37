"""A policy per agent through the real proxy and the embedded engine holding two LoRA adapters:
each call generates with its agent's adapter (an unnamed continuation with its parent's agent),
an agent no policy names with the base model, and every export (the wire's interactions and
tree pack, the capture store, Parquet and JSONL) carries each call's policy and its tokens that
policy's version. Without policies nothing names one."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import orjson
import pytest

from rltap.chat.renderer import ChatRenderer
from rltap.client.direct import DirectOpenAI
from rltap.client.proxy import interactions_from_export, tree_from_export
from rltap.config import ChatConfig, EngineConfig, ServeConfig, StoreConfig
from rltap.config.policies import PolicyConfig
from rltap.engines.transformers import TransformersEngine
from rltap.record.types import ModelRequest
from rltap.rollout.serving import local_proxy
from rltap.store.files import export_store
from rltap.store.read import StoreReader
from rltap.testing.adapters import random_adapter
from rltap.testing.proxy import RunningProxy, start_test_proxy
from rltap.tree.links import agent_header_value

peft = pytest.importorskip("peft")

POLICIES = {
    "tutor": PolicyConfig(agents=("Math Tutor",), lora_rank=4),
    "student": PolicyConfig(agents=("Student", "Student's helper"), lora_rank=4),
}
VERSIONS = {"tutor": 3, "student": 7, None: 0}
TOKENS = 6


@contextlib.asynccontextmanager
async def policy_proxy(
    tiny_model: Any, renderer: ChatRenderer, config: ServeConfig
) -> AsyncIterator[RunningProxy]:
    """The proxy on `config` over an embedded engine holding the tutor's and the student's
    adapters (at versions 3 and 7; the base model at 0)."""
    engine = TransformersEngine(copy.deepcopy(tiny_model), eos_token_ids=[])
    async with start_test_proxy(engine, renderer, config) as proxy:
        for seed, name in enumerate(("tutor", "student"), start=1):
            adapter = random_adapter(tiny_model, name, seed)
            assert await engine.update_weights(adapter, version=VERSIONS[name]) == VERSIONS[name]
        yield proxy


async def episode(proxy: RunningProxy) -> tuple[str, list[str]]:
    """One session: the tutor, the student, a critic no policy names, and the tutor's
    conversation continued without a header (its parent's agent); the calls' ids in order."""
    session_id, key = await proxy.start_session()
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
    ids = []

    async def call(messages: list[Any], agent: str | None) -> Any:
        headers = {} if agent is None else {"X-Rltap-Agent": agent_header_value(agent)}
        completion = await client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=TOKENS, temperature=0,
            extra_headers=headers,
        )  # fmt: skip
        ids.append(completion.id)
        return completion.choices[0].message.model_dump(exclude_none=True)

    tutor_turn: list[Any] = [
        {"role": "system", "content": "You teach."},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    reply = await call(tutor_turn, "Math Tutor")
    await call([{"role": "system", "content": "You learn."}, tutor_turn[1]], "Student")
    await call([{"role": "system", "content": "You judge."}, tutor_turn[1]], "Critic")
    await call([*tutor_turn, reply, {"role": "user", "content": "Why?"}], None)
    response = await proxy.session_post(key, "/rl/set_reward", {"reward": 1.0})
    assert response.status_code == 200, response.text
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    return session_id, ids


@pytest.mark.slow  # seconds of decoding: make test runs it, make check does not
async def test_each_agent_generates_with_its_policy_and_every_export_says_which(
    tiny_model: Any, renderer: ChatRenderer, tmp_path: Path
) -> None:
    store = tmp_path / "capture.sqlite"
    config = ServeConfig(
        chat=ChatConfig(max_context=1024), store=StoreConfig(store=str(store)), policies=POLICIES
    )
    expected = ["tutor", "student", None, "tutor"]
    async with policy_proxy(tiny_model, renderer, config) as proxy:
        session_id, ids = await episode(proxy)
        cache = proxy.state.store.get(session_id).session.cache
        assert [cache[i].agent_id for i in ids][:3] == ["Math Tutor", "Student", "Critic"]
        assert cache[ids[3]].agent_id == "Math Tutor"  # a prefix child: its parent's agent
        assert [cache[i].policy for i in ids] == expected
        engine = proxy.state.engine
        for interaction_id, policy in zip(ids, expected, strict=True):
            response = cache[interaction_id].model_response
            assert response is not None
            assert response.output_versions == [VERSIONS[policy]] * response.output_len
            # What the proxy recorded is the policy's adapter's greedy reply, not another's.
            again: dict[str | None, Any] = {}
            for other in VERSIONS:
                ask = ModelRequest(
                    input_ids=response.input_tokens, max_new_tokens=response.output_len,
                    temperature=0.0, stop_token_ids=list(renderer.stop_token_ids), policy=other,
                )  # fmt: skip
                again[other] = await engine.generate(ask)
            assert again[policy].output_tokens == response.output_tokens
            mine = np.array(again[policy].output_logprobs)
            assert np.abs(mine - response.output_logprobs).max() <= 1e-5
            for other, reply in again.items():
                if other != policy:
                    theirs = np.array(reply.output_logprobs[: len(mine)])
                    assert np.abs(theirs - mine[: len(theirs)]).max() > 1e-3, (policy, other)

        # An export frees its session: a second episode for the other style.
        second_id, second = await episode(proxy)
        individual = await proxy.export(second_id, style="individual")
        items = {item["interaction_id"]: item for item in individual["interactions"]}
        assert [items[i].get("policy") for i in second] == expected
        assert "policy" not in items[second[2]]  # the base model's call: no policy field
        rebuilt = interactions_from_export(individual)
        for interaction_id, policy in zip(second, expected, strict=True):
            assert rebuilt[interaction_id].policy == policy
            versions = rebuilt[interaction_id].to_tensor_dict()["versions"][0]
            generated = versions[versions >= 0]
            assert generated.tolist() == [VERSIONS[policy]] * len(generated)

        tree = await proxy.export(session_id, style="tree")
        pack = tree_from_export(tree)
        policy_of = dict(zip(pack.interaction_ids, pack.interaction_policies or [], strict=True))
        assert [policy_of[i] for i in ids] == expected
        assert tree["tree"]["interaction_policies"] == pack.interaction_policies
        for policy in VERSIONS:
            mask = pack.policy_mask(policy).astype(bool)
            made = [pack.interaction_ids[k] for k in set(pack.interaction_index[mask].tolist())]
            assert sorted(made) == sorted(
                i for i, p in zip(ids, expected, strict=True) if p == policy
            )
            assert set(pack.versions[mask].tolist()) == {VERSIONS[policy]}
        generated = pack.interaction_index >= 0
        covered = sum(pack.policy_mask(policy) for policy in VERSIONS)
        assert covered.tolist() == generated.astype(np.int32).tolist()

    # The capture store kept each call's policy; its exports carry it.
    with StoreReader(store) as reader:
        assert reader.has_policies()
        stored = reader.session(session_id).cache
        assert [stored[i].policy for i in ids] == expected
    policies = dict(zip([*ids, *second], expected * 2, strict=True))
    parquet = export_store(store, tmp_path / "calls.parquet", "parquet")
    assert parquet.rows == 8
    import pyarrow.parquet as pq

    table = pq.read_table(parquet.path).to_pylist()
    assert {row["interaction_id"]: row["policy"] for row in table} == policies
    rows = export_store(store, tmp_path / "calls.jsonl", "jsonl")
    lines = [orjson.loads(line) for line in rows.path.read_bytes().splitlines()]
    assert {line["interaction_id"]: line.get("policy") for line in lines} == policies
    trees = pq.read_table(export_store(store, tmp_path / "tree.parquet", "parquet", "tree").path)
    assert {
        interaction_id: policy
        for row in trees.to_pylist()
        for interaction_id, policy in zip(
            row["interaction_ids"], row["interaction_policies"], strict=True
        )
    } == policies


async def test_without_policies_no_call_names_one(
    tiny_model: Any, renderer: ChatRenderer, tmp_path: Path
) -> None:
    store = tmp_path / "capture.sqlite"
    config = ServeConfig(chat=ChatConfig(max_context=1024), store=StoreConfig(store=str(store)))
    async with policy_proxy(tiny_model, renderer, config) as proxy:
        session_id, ids = await episode(proxy)
        cache = proxy.state.store.get(session_id).session.cache
        assert [cache[i].policy for i in ids] == [None] * 4
        for interaction_id in ids:  # the engine's adapters are named: no call asks for one
            response = cache[interaction_id].model_response
            assert response is not None
            assert set(response.output_versions) == {0}
        individual = await proxy.export(session_id, style="individual")
        assert all("policy" not in item for item in individual["interactions"])
        second_id, _ = await episode(proxy)  # an export frees its session
        tree = await proxy.export(second_id, style="tree")
        assert "interaction_policies" not in tree["tree"]
        assert tree_from_export(tree).interaction_policies is None
    with StoreReader(store) as reader:
        assert not reader.has_policies()
    import pyarrow.parquet as pq

    names = pq.read_schema(export_store(store, tmp_path / "calls.parquet", "parquet").path).names
    assert "policy" not in names


async def test_the_direct_client_routes_by_the_same_policies(
    tiny_model: Any, renderer: ChatRenderer
) -> None:
    engine = TransformersEngine(copy.deepcopy(tiny_model), eos_token_ids=[])
    client = DirectOpenAI(
        engine, renderer.tokenizer, chat=ChatConfig(max_context=1024), policies=POLICIES
    )
    await engine.start()
    try:
        await engine.update_weights(random_adapter(tiny_model, "student", 2), version=7)
        for agent in ("Student's helper", "Critic"):
            await client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                extra_headers={"X-Rltap-Agent": agent_header_value(agent)},
            )  # fmt: skip
        calls = list(client.session.cache.values())
        assert [call.policy for call in calls] == ["student", None]
        assert [set(call.model_response.output_versions) for call in calls] == [{7}, {0}]  # type: ignore[union-attr]
    finally:
        await client.close()
        await engine.close()


async def test_a_rollout_s_local_proxy_routes_by_its_serving_settings_policies(
    tiny_model: Any, tiny_model_dir: Path, renderer: ChatRenderer
) -> None:
    """`rltap train`'s road: `TrainConfig.rollout().serve` carries the policies into
    `local_proxy` (in process, or in each Ray actor)."""
    engine = TransformersEngine(copy.deepcopy(tiny_model), eos_token_ids=[])
    config = ServeConfig(
        engine=EngineConfig(model=str(tiny_model_dir)),
        chat=ChatConfig(max_context=1024),
        policies=POLICIES,
    )
    async with (
        local_proxy(config, engine=engine, tokenizer=renderer.tokenizer) as serving,
        httpx.AsyncClient(timeout=60) as http,
    ):
        await engine.update_weights(random_adapter(tiny_model, "tutor", 1), version=3)
        admin = {"authorization": f"Bearer {serving.admin_key}"}
        started = (await http.post(f"{serving.url}/rl/start_session", headers=admin)).json()
        client = openai.AsyncOpenAI(
            base_url=f"{serving.url}/v1", api_key=started["api_key"], http_client=http
        )
        await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
            extra_headers={"X-Rltap-Agent": agent_header_value("Math Tutor")},
        )  # fmt: skip
        key = {"authorization": f"Bearer {started['api_key']}"}
        assert (await http.post(f"{serving.url}/rl/end_session", headers=key)).status_code == 200
        body = {"session_id": started["session_id"], "format": "rltap"}
        exported = await http.post(f"{serving.url}/export_trajectories", json=body, headers=admin)
        assert exported.status_code == 200, exported.text
        (item,) = exported.json()["interactions"]
        assert item["policy"] == "tutor"
        (call,) = interactions_from_export(exported.json()).values()
        assert call.model_response is not None
        assert set(call.model_response.output_versions) == {3}
