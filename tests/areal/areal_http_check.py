"""AReaL 1.0.4's own proxy client against rltap's proxy (`rltap serve --export-format areal`):
its session lifecycle, rewards and `export_interactions` read rltap's AReaL-format export.

Needs `areal` installed: the AReaL nox session runs it by path (`pytest
tests/areal/areal_http_check.py`); its name keeps the core suite, which has no `areal`, from
collecting it.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import torch
from areal.experimental.openai.proxy.client_session import OpenAIProxyClient

from rltap.chat.renderer import ChatRenderer
from rltap.engines.scripted import ScriptedEngine
from rltap.proxy.state import ProxyConfig
from rltap.session import SessionConfig
from rltap.testing.proxy import TEST_ADMIN_KEY, start_test_proxy
from rltap.testing.scripts import echo


async def test_areals_client_reads_the_areal_export(
    tiny_model: Any, renderer: ChatRenderer
) -> None:
    engine = ScriptedEngine(echo, tiny_model, tokenizer=renderer.tokenizer)
    config = ProxyConfig(
        admin_key=TEST_ADMIN_KEY,
        session=SessionConfig(max_context=2048, default_max_tokens=16),
        export_format="areal",
    )
    async with (
        start_test_proxy(engine, renderer, config) as proxy,
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
