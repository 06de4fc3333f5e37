"""`/export_trajectories` in AReaL's format and with chain or tree discounting, the
`--export-format` default, and `/rl/end_session`'s count, over a real proxy."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import torch

from rltap.client.proxy import OpenAIProxyClient
from rltap.config import ServeConfig, add_arguments, from_namespace
from rltap.proxy.control import ExportRequest, export_body
from rltap.proxy.server import ServeSetup
from rltap.record.tensor_codec import decode_tensors
from rltap.testing.proxy import TEST_ADMIN_KEY, RunningProxy, start_test_proxy

DISCOUNT = 0.5
# Root A, then B and C both continuing A (siblings), C rewarded 1.0, discount 0.5.
# chain (insertion order A, B, C): C = 1, B = 0 + 0.5 * C = 0.5, A = 0 + 0.5 * B = 0.25.
# tree: C = 1, B = 0 (nothing continues it), A = 0.5 * mean(B, C) = 0.25.
CHAIN = {"A": 0.25, "B": 0.5, "C": 1.0}
TREE = {"A": 0.25, "B": 0.0, "C": 1.0}


async def _chat(proxy: RunningProxy, key: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"model": "tiny", "messages": messages, "max_tokens": 16}
    response = await proxy.session_post(key, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


async def branch(proxy: RunningProxy, key: str) -> dict[str, str]:
    """Root A and its two continuations B and C, C rewarded: the interaction ids by name."""
    first = [{"role": "user", "content": "start"}]
    root = await _chat(proxy, key, first)
    history = [*first, {"role": "assistant", "content": root["choices"][0]["message"]["content"]}]
    left = await _chat(proxy, key, [*history, {"role": "user", "content": "left"}])
    right = await _chat(proxy, key, [*history, {"role": "user", "content": "right"}])
    rewarded = await proxy.session_post(key, "/rl/set_reward", {"reward": 1.0})
    assert rewarded.json()["interaction_id"] == right["id"]
    return {"A": root["id"], "B": left["id"], "C": right["id"]}


async def branching_session(proxy: RunningProxy) -> tuple[str, str, dict[str, str]]:
    """A new session holding `branch`, not yet ended: its id, its key and the ids by name."""
    session_id, key = await proxy.start_session()
    return session_id, key, await branch(proxy, key)


async def _end(proxy: RunningProxy, key: str) -> dict[str, Any]:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    ended: dict[str, Any] = response.json()
    return ended


def _areal_rewards(body: dict[str, Any], ids: dict[str, str]) -> dict[str, float]:
    items = body["interactions"]
    rewards = {name: items[ids[name]]["reward"] for name in ids}
    for item in items.values():
        assert decode_tensors(item["tensor_dict"])["rewards"].tolist() == [item["reward"]]
    return rewards


async def test_the_areal_export_holds_the_rltap_tensors(proxy: RunningProxy) -> None:
    session_id, key, ids = await branching_session(proxy)
    ended = await _end(proxy, key)
    assert ended["interaction_count"] == 3
    assert ended["message"] == "success"
    record = proxy.state.store.get(session_id)
    request = ExportRequest(session_id=session_id, discount=DISCOUNT, discount_mode="chain")
    rltap_body = export_body(record, request)  # what the route answers in rltap's format

    body = await proxy.export(session_id, format="areal", discount=DISCOUNT)
    assert set(body) == {"interactions", "not_exported"}
    assert body["not_exported"] == []
    assert list(body["interactions"]) == [ids["A"], ids["B"], ids["C"]]  # insertion order
    for item in rltap_body["interactions"]:
        areal_item = body["interactions"][item["interaction_id"]]
        assert set(areal_item) == {"tensor_dict", "reward", "interaction_id"}
        assert areal_item["interaction_id"] == item["interaction_id"]
        assert areal_item["reward"] == item["reward"]
        envelopes = areal_item["tensor_dict"]
        assert {name: t["dtype"] for name, t in envelopes.items()} == {
            "input_ids": "torch.int32",
            "loss_mask": "torch.int32",
            "logprobs": "torch.float32",
            "versions": "torch.int32",
            "attention_mask": "torch.bool",
            "rewards": "torch.float32",
        }
        assert all(t["type"] == "tensor" for t in envelopes.values())
        areal_tensors, rltap_tensors = decode_tensors(envelopes), decode_tensors(item["tensors"])
        assert areal_tensors.keys() == rltap_tensors.keys()
        for name, tensor in rltap_tensors.items():
            assert areal_tensors[name].dtype == tensor.dtype, name
            assert torch.equal(areal_tensors[name], tensor), name
    assert _areal_rewards(body, ids) == CHAIN


@pytest.mark.parametrize(
    ("export_format", "discount_mode", "expected"),
    [
        pytest.param("rltap", None, TREE, id="rltap-default-tree"),
        pytest.param("rltap", "chain", CHAIN, id="rltap-chain"),
        pytest.param("areal", None, CHAIN, id="areal-default-chain"),
        pytest.param("areal", "tree", TREE, id="areal-tree"),
    ],
)
async def test_chain_and_tree_discount_a_branching_session(
    proxy: RunningProxy, export_format: str, discount_mode: str | None, expected: dict[str, float]
) -> None:
    session_id, key, ids = await branching_session(proxy)
    await _end(proxy, key)
    options: dict[str, Any] = {"format": export_format, "discount": DISCOUNT}
    if discount_mode is not None:
        options["discount_mode"] = discount_mode
    body = await proxy.export(session_id, **options)
    if export_format == "areal":
        assert _areal_rewards(body, ids) == expected
        return
    assert body["discount_mode"] == ("tree" if discount_mode is None else discount_mode)
    rewards = {item["interaction_id"]: item["reward"] for item in body["interactions"]}
    assert {name: rewards[ids[name]] for name in ids} == expected


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("format", "parquet", id="format"),
        pytest.param("discount_mode", "backwards", id="discount-mode"),
        pytest.param("format", 1, id="format-int"),
    ],
)
async def test_a_bad_format_or_discount_mode_is_400(
    proxy: RunningProxy, field: str, value: object
) -> None:
    session_id, key = await proxy.start_session()
    await _end(proxy, key)
    response = await proxy.admin("/export_trajectories", {"session_id": session_id, field: value})
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"}
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == field
    assert field in error["message"]
    assert (await proxy.export(session_id))["interactions"] == []  # the 400 kept the session


async def test_end_session_counts_every_recorded_call(proxy: RunningProxy) -> None:
    _, key, _ = await branching_session(proxy)
    ended = await _end(proxy, key)
    assert ended["interaction_count"] == 3
    _, empty_key = await proxy.start_session()
    assert (await _end(proxy, empty_key))["interaction_count"] == 0


async def test_serve_export_format_areal_is_the_default_body(tiny_model_dir: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser, ServeConfig)
    flags = [
        "--engine", "scripted", "--script", "rltap.testing.scripts:echo",
        "--model", str(tiny_model_dir), "--export-format", "areal",
    ]  # fmt: skip
    setup = ServeSetup.load(from_namespace(ServeConfig, parser.parse_args(flags)))
    assert setup.config.limits.export_format == "areal"
    try:
        async with start_test_proxy(setup.engine, setup.renderer, setup.config) as proxy:
            session_id, key, ids = await branching_session(proxy)
            await _end(proxy, key)
            body = await proxy.export(session_id, discount=DISCOUNT)
            assert _areal_rewards(body, ids) == CHAIN

            # The client asks for rltap's format, so it reads this proxy too.
            async with OpenAIProxyClient(proxy.url, TEST_ADMIN_KEY, http_client=proxy.http) as s:
                ids = await branch(proxy, str(s.api_key))
            exported = await s.export_interactions(discount=DISCOUNT, discount_mode="chain")
    finally:
        await setup.engine.close()
    assert {name: exported[ids[name]].reward for name in ids} == CHAIN
    assert parser.parse_args([]).export_format == "rltap"
