"""AReaL 1.0.4's own proxy client against rltap's proxy (`rltap serve --export-format areal`):
its session lifecycle, rewards and `export_interactions` read rltap's AReaL-format export, with
rltap's engines and with an AReaL engine behind the proxy.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import torch
from areal.api.io_struct import ModelResponse
from areal.experimental.openai.proxy.client_session import OpenAIProxyClient

from rltap.areal import ArealEngine
from rltap.chat.renderer import ChatRenderer
from rltap.client.proxy import interactions_from_export
from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.engines.scripted import ScriptedEngine
from rltap.proxy.control import ExportRequest, export_body
from rltap.testing.areal_engine import ScriptedArealEngine
from rltap.testing.proxy import TEST_ADMIN_KEY, start_test_proxy
from rltap.testing.scripts import echo

# `rltap serve --export-format areal`: AReaL's trainer reads the default body.
AREAL_CONFIG = ServeConfig(
    chat=ChatConfig(max_context=2048, default_max_tokens=16),
    limits=LimitsConfig(export_format="areal"),
)


async def test_areals_client_reads_the_areal_export(
    tiny_model: Any, renderer: ChatRenderer
) -> None:
    engine = ScriptedEngine(echo, tiny_model, tokenizer=renderer.tokenizer)
    async with (
        start_test_proxy(engine, renderer, AREAL_CONFIG) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = OpenAIProxyClient(http, proxy.url, "task-1", TEST_ADMIN_KEY)
        async with client:
            agent = openai.AsyncOpenAI(
                base_url=proxy.base_url, api_key=client.session_api_key, max_retries=0
            )
            first = [{"role": "user", "content": "start"}]
            root = await agent.chat.completions.create(model="default", messages=first)
            history: list[Any] = [
                *first,
                {"role": "assistant", "content": root.choices[0].message.content},
            ]
            left = await agent.chat.completions.create(
                model="default", messages=[*history, {"role": "user", "content": "left"}]
            )
            right = await agent.chat.completions.create(
                model="default", messages=[*history, {"role": "user", "content": "right"}]
            )
            await client.set_last_reward(1.0)
            await agent.close()
        interactions = await client.export_interactions(discount=0.5)
    await engine.close()

    # AReaL's numbers: insertion-order discounting (root, left, right).
    assert list(interactions) == [root.id, left.id, right.id]
    assert [interactions[i].reward for i in interactions] == [0.25, 0.5, 1.0]
    for interaction_id, interaction in interactions.items():
        assert interaction.interaction_id == interaction_id
        tensors = interaction.to_tensor_dict()
        length = tensors["input_ids"].shape[1]
        by_dtype: dict[torch.dtype, set[str]] = {}
        for name, tensor in tensors.items():
            by_dtype.setdefault(tensor.dtype, set()).add(name)
        assert by_dtype == {
            torch.int32: {"input_ids", "loss_mask", "versions"},
            torch.float32: {"logprobs", "rewards"},
            torch.bool: {"attention_mask"},
        }
        assert all(t.shape == (1, length) for n, t in tensors.items() if n != "rewards")
        assert tensors["rewards"].tolist() == [interaction.reward]
        assert tensors["attention_mask"].all()
        generated = tensors["loss_mask"][0].bool()
        assert generated.any()
        assert (tensors["versions"][0][~generated] == -1).all()
        assert (tensors["logprobs"][0][generated] < 0).all()


async def test_areals_client_export_is_rltaps_export_of_the_session(renderer: ChatRenderer) -> None:
    tokenizer = renderer.tokenizer
    areal_engine = ScriptedArealEngine(
        tokenizer, ["root", "left", "right"], response_class=ModelResponse, version=1
    )
    engine = ArealEngine(areal_engine, tokenizer=tokenizer)
    async with (
        start_test_proxy(engine, renderer, AREAL_CONFIG) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = OpenAIProxyClient(http, proxy.url, "task-1", TEST_ADMIN_KEY)
        async with client:
            # AReaL's inline workflow hands its agents the proxy's address itself (no /v1).
            agent = openai.AsyncOpenAI(
                base_url=client.base_url, api_key=client.session_api_key, max_retries=0
            )
            first: list[Any] = [{"role": "user", "content": "start"}]
            root = await agent.chat.completions.create(model="default", messages=first)
            history = [*first, root.choices[0].message.model_dump(exclude_none=True)]
            for branch in ("left", "right"):
                messages = [*history, {"role": "user", "content": branch}]
                await agent.chat.completions.create(model="default", messages=messages)
            await client.set_last_reward(1.0)
            await agent.close()
        assert client.session_id is not None
        # rltap's own export of the same session, taken before AReaL's client frees it.
        request = ExportRequest(
            session_id=client.session_id, format="rltap", discount=0.5, discount_mode="chain"
        )
        ours = interactions_from_export(
            export_body(proxy.state.store.get(client.session_id), request)
        )
        interactions = await client.export_interactions(discount=0.5)

    assert list(interactions) == list(ours)
    assert [interaction.reward for interaction in interactions.values()] == [0.25, 0.5, 1.0]
    for interaction_id, interaction in interactions.items():
        assert interaction.reward == ours[interaction_id].reward
        theirs, mine = interaction.to_tensor_dict(), ours[interaction_id].to_tensor_dict()
        assert theirs.keys() == mine.keys()
        for name, tensor in mine.items():
            assert theirs[name].dtype == tensor.dtype, name
            assert torch.equal(theirs[name], tensor), name
        generated = mine["loss_mask"][0].bool()
        assert set(mine["versions"][0][generated].tolist()) == {1}
