"""Sessions over HTTP: capacity grants, TTL reaping, export waits, the trainer-side client, the
policy version, and the health, model-list and metrics routes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
import pytest
import torch
from add_tool import CHAT_ADD_TOOL
from prometheus_client.parser import text_string_to_metric_families

from rltap.client.proxy import OpenAIProxyClient
from rltap.config.serve import LimitsConfig
from rltap.record import errors
from rltap.testing.proxy import RunningProxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]


async def poll(check: Callable[[], Awaitable[bool]], within: float, what: str) -> float:
    """Call `check` until it is true; returns the seconds it took (fails after `within`)."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > within:
            pytest.fail(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def chat(proxy: RunningProxy, key: str, text: str = "hi") -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}]}
    response = await proxy.session_post(key, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def assert_capacity_error(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert int(response.headers["retry-after"]) >= 1
    assert response.json()["error"]["type"] == "rate_limit_error"


def metric_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def open_sessions(proxy: RunningProxy) -> float:
    response = await proxy.http.get(f"{proxy.url}/metrics")
    return metric_values(response.text)[("rltap_open_sessions", ())]


# --- capacity ------------------------------------------------------------------------------


async def test_grants_beyond_capacity_are_429_until_one_expires(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(limits=LimitsConfig(capacity=2, grant_ttl=0.4))
    granted_at = time.monotonic()
    for _ in range(2):
        response = await proxy.admin("/grant_capacity")
        assert response.status_code == 200, response.text
        assert response.json() == {"granted": True, "expires_in": 0.4}
    assert_capacity_error(await proxy.admin("/grant_capacity"))

    async def granted() -> bool:
        response = await proxy.admin("/grant_capacity")
        if response.status_code != 200:
            assert_capacity_error(response)
        return response.status_code == 200

    await poll(granted, within=5.0, what="an expired grant to free its slot")
    assert time.monotonic() - granted_at >= 0.4
    # One grant is held again and one slot is free: two sessions start, a third does not.
    await proxy.start_session()
    await proxy.start_session()
    assert_capacity_error(await proxy.admin("/rl/start_session", {}))


async def test_ending_a_session_returns_its_slot(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(limits=LimitsConfig(capacity=2))
    first_id, first_key = await proxy.start_session()
    await proxy.start_session()
    assert_capacity_error(await proxy.admin("/rl/start_session", {}))
    assert_capacity_error(await proxy.admin("/grant_capacity"))

    await chat(proxy, first_key)
    assert (await proxy.session_post(first_key, "/rl/end_session")).status_code == 200
    # The ended session no longer holds a slot, though it is not exported yet.
    assert (await proxy.admin("/grant_capacity")).status_code == 200
    third_id, _ = await proxy.start_session()
    assert third_id != first_id
    assert_capacity_error(await proxy.admin("/rl/start_session", {}))
    export = await proxy.export(first_id)
    assert len(export["interactions"]) == 1


# --- TTL reaping ---------------------------------------------------------------------------


async def test_idle_sessions_are_reaped_and_exportable_during_the_grace(
    make_proxy: ProxyFactory,
) -> None:
    limits = LimitsConfig(capacity=8, session_ttl=0.3, reap_interval=0.05, export_grace=1.5)
    proxy = await make_proxy(limits=limits)
    first_id, first_key = await proxy.start_session()
    second_id, second_key = await proxy.start_session()
    first_reply = await chat(proxy, first_key, "first")
    await chat(proxy, second_key, "second")
    assert await open_sessions(proxy) == 2

    # Nothing touches the sessions: the background task alone reaps them.
    async def all_reaped() -> bool:
        return await open_sessions(proxy) == 0

    waited = await poll(all_reaped, within=5.0, what="the reaper")
    reaped_at = time.monotonic()
    assert waited >= 0.2

    response = await proxy.session_post(first_key, "/v1/chat/completions", {"messages": []})
    assert response.status_code == 410, response.text
    assert response.json()["error"]["code"] == "session_ended"
    export = await proxy.export(first_id, wait_timeout=0)
    assert export["state"] == "reaped"
    assert [i["interaction_id"] for i in export["interactions"]] == [first_reply["id"]]
    assert export["not_exported"] == []

    # The second one is not exported: after the grace period it is gone.
    async def forgotten() -> bool:
        response = await proxy.session_post(second_key, "/rl/set_reward", {"reward": 1.0})
        assert response.status_code in (401, 410), response.text
        return response.status_code == 401

    await poll(forgotten, within=10.0, what="the grace period to run out")
    assert time.monotonic() - reaped_at >= 1.0
    response = await proxy.admin("/export_trajectories", {"session_id": second_id})
    assert response.status_code == 404, response.text


async def test_a_session_in_use_is_not_reaped(make_proxy: ProxyFactory) -> None:
    limits = LimitsConfig(capacity=8, session_ttl=0.4, reap_interval=0.05)
    proxy = await make_proxy(limits=limits)
    session_id, key = await proxy.start_session()
    started = time.monotonic()
    while time.monotonic() - started < 1.2:  # three TTLs, but never idle for one
        await chat(proxy, key)
        await asyncio.sleep(0.1)
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = await proxy.export(session_id)
    assert export["state"] == "ended"


# --- export waits --------------------------------------------------------------------------


async def test_export_waits_for_the_session_to_end(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    reply = await chat(proxy, key)
    export_call = asyncio.create_task(
        proxy.admin("/export_trajectories", {"session_id": session_id, "wait_timeout": 20})
    )
    done, _ = await asyncio.wait({export_call}, timeout=0.4)
    assert not done, "the export returned before the session ended"
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    response = await asyncio.wait_for(export_call, 10)
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "ended"
    assert [i["interaction_id"] for i in response.json()["interactions"]] == [reply["id"]]

    # The export freed the session.
    response = await proxy.admin("/export_trajectories", {"session_id": session_id})
    assert response.status_code == 404, response.text


async def test_export_of_an_active_session_times_out_with_409(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    await chat(proxy, key)
    started = time.monotonic()
    response = await proxy.admin(
        "/export_trajectories", {"session_id": session_id, "wait_timeout": 0.2}
    )
    assert time.monotonic() - started >= 0.2
    assert response.status_code == 409, response.text
    assert response.json()["error"]["param"] == "session_id"
    # Nothing was freed: the session goes on and exports once ended.
    await chat(proxy, key, "again")
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = await proxy.export(session_id)
    assert len(export["interactions"]) == 2


# --- OpenAIProxyClient ---------------------------------------------------------------------


async def test_openai_proxy_client_end_to_end(proxy: RunningProxy) -> None:
    async with OpenAIProxyClient(proxy.url, proxy.admin_key, task_id="task-1") as session:
        agent = openai.AsyncOpenAI(
            base_url=session.base_url, api_key=session.api_key, http_client=proxy.http
        )
        messages: list[Any] = [{"role": "user", "content": "add 2 and 2"}]
        first = await agent.chat.completions.create(
            model="tiny", messages=messages, tools=[CHAT_ADD_TOOL]
        )
        (call,) = first.choices[0].message.tool_calls or []
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "4"},
        ]
        second = await agent.chat.completions.create(
            model="tiny", messages=messages, tools=[CHAT_ADD_TOOL]
        )
        assert await session.set_last_reward(1.0) == second.id
        await session.set_reward(first.id, 0.5)
    assert session.session_id is not None
    held = proxy.state.store.get(session.session_id).session.cache

    exported = await session.export_interactions(discount=0.9, style="individual")
    assert list(exported) == [first.id, second.id]
    assert exported[second.id].parent is exported[first.id]
    assert exported[second.id].reward == pytest.approx(1.0)
    assert exported[first.id].reward == pytest.approx(0.5 + 0.9 * 1.0)
    expected = held.export_interactions(style="individual", reward_discount=0.9)
    for interaction_id, node in expected.items():
        got = exported[interaction_id].to_tensor_dict()
        want = node.to_tensor_dict()
        assert got.keys() == want.keys()
        for name, tensor in want.items():
            assert got[name].dtype == tensor.dtype, name
            assert torch.equal(got[name], tensor), name
    # The session is gone after its export.
    with pytest.raises(errors.NotFound):
        await session.export_interactions()
    await session.aclose()


async def test_openai_proxy_client_retries_until_capacity_frees(
    make_proxy: ProxyFactory,
) -> None:
    proxy = await make_proxy(limits=LimitsConfig(capacity=1))
    holder = OpenAIProxyClient(proxy.url, proxy.admin_key, http_client=proxy.http)
    await holder.start_session()

    impatient = OpenAIProxyClient(
        proxy.url, proxy.admin_key, http_client=proxy.http, max_retries=2, max_backoff=0.05
    )
    with pytest.raises(errors.CapacityExhausted):
        await impatient.start_session()

    waiting = OpenAIProxyClient(
        proxy.url, proxy.admin_key, http_client=proxy.http, max_retries=200, max_backoff=0.05
    )
    entering = asyncio.create_task(waiting.__aenter__())
    done, _ = await asyncio.wait({entering}, timeout=0.4)
    assert not done, "the session started while the only slot was taken"
    await holder.end_session()
    assert await asyncio.wait_for(entering, 10) is waiting
    assert waiting.api_key is not None
    await chat(proxy, waiting.api_key)
    await waiting.__aexit__(None, None, None)
    assert len(await waiting.export_interactions()) == 1


# --- policy version, health, models, metrics -----------------------------------------------


async def test_set_version_is_recorded_on_later_tokens(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    before = await chat(proxy, key, "before")
    response = await proxy.admin("/rl/set_version", {"version": 3})
    assert response.status_code == 200, response.text
    assert response.json() == {"version": 3}
    health = await proxy.http.get(f"{proxy.url}/health")
    assert health.json()["version"] == 3
    after = await chat(proxy, key, "after")
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200

    export = await proxy.export(session_id)
    from rltap.record.tensor_codec import decode_tensors

    versions = {
        item["interaction_id"]: (item["input_len"], decode_tensors(item["tensors"])["versions"][0])
        for item in export["interactions"]
    }
    for interaction_id, version in ((before["id"], 0), (after["id"], 3)):
        prompt_len, tokens = versions[interaction_id]
        assert set(tokens[:prompt_len].tolist()) == {-1}
        assert set(tokens[prompt_len:].tolist()) == {version}


async def test_health_and_models(proxy: RunningProxy) -> None:
    health = await proxy.http.get(f"{proxy.url}/health")
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "model": "tiny", "version": 0}

    response = await proxy.http.get(f"{proxy.url}/v1/models")
    assert response.status_code == 401, response.text
    assert response.json()["error"]["type"] == "authentication_error"
    _, key = await proxy.start_session()
    for api_key in (key, proxy.admin_key):
        client = openai.AsyncOpenAI(
            base_url=proxy.base_url, api_key=api_key, http_client=proxy.http
        )
        assert [model.id async for model in client.models.list()] == ["tiny"]
    stranger = openai.AsyncOpenAI(
        base_url=proxy.base_url, api_key="sk-stranger", http_client=proxy.http
    )
    with pytest.raises(openai.AuthenticationError):
        await stranger.models.list()


async def test_metrics_count_requests_tokens_and_overhead(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
    plain = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "count me"}]
    )
    streamed = await client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "count me too"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage async for chunk in streamed if chunk.usage is not None]
    response = await client.responses.create(model="tiny", input="and me")
    bad = await proxy.http.post(f"{proxy.url}/v1/chat/completions", json={})
    assert bad.status_code == 401

    page = await proxy.http.get(f"{proxy.url}/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain")
    values = metric_values(page.text)

    def requests(route: str, status: str) -> float:
        return values.get(("rltap_requests_total", (("route", route), ("status", status))), 0)

    assert values[("rltap_open_sessions", ())] == 1
    assert requests("/v1/chat/completions", "200") == 2
    assert requests("/v1/chat/completions", "401") == 1
    assert requests("/v1/responses", "200") == 1
    assert requests("/rl/start_session", "200") == 1
    assert values[("rltap_request_seconds_count", (("route", "/v1/chat/completions"),))] == 3
    assert values[("rltap_proxy_overhead_seconds_count", (("route", "chat"),))] == 2
    assert values[("rltap_proxy_overhead_seconds_count", (("route", "responses"),))] == 1
    assert values[("rltap_proxy_overhead_seconds_sum", (("route", "chat"),))] > 0
    assert plain.usage is not None
    assert response.usage is not None
    (stream_usage,) = usage
    assert values[("rltap_prompt_tokens_total", ())] == (
        plain.usage.prompt_tokens + stream_usage.prompt_tokens + response.usage.input_tokens
    )
    assert values[("rltap_completion_tokens_total", ())] == (
        plain.usage.completion_tokens
        + stream_usage.completion_tokens
        + response.usage.output_tokens
    )

    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    assert await open_sessions(proxy) == 0


# --- an episode's sampling (start_session's `sampling`) ------------------------------------


async def _sampled_ids(
    proxy: RunningProxy, sampling: dict[str, Any], temperature: float
) -> list[list[int]]:
    """The output ids of a session's two calls, the agent asking for `temperature`."""
    session_id, key = await proxy.start_session(sampling=sampling)
    for text in ("one", "two"):
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 8,
            "temperature": temperature,
        }
        response = await proxy.session_post(key, "/v1/chat/completions", body)
        assert response.status_code == 200, response.text
    cache = proxy.state.store.get(session_id).session.cache
    ids = []
    for node in cache.values():
        assert node.model_response is not None
        ids.append(node.model_response.output_tokens)
    return ids


async def test_a_session_seed_repeats_its_samples_and_its_temperature_overrides_the_calls(
    make_proxy: ProxyFactory, tiny_model: Any, qwen_tokenizer: Any
) -> None:
    from rltap.engines.transformers import TransformersEngine

    engine = TransformersEngine(tiny_model, tokenizer=qwen_tokenizer, eos_token_ids=[])
    proxy = await make_proxy(engine=engine)
    # Call k of a session samples with a seed derived from (session seed, k): the same seed
    # gives the same tokens, calls of one session differ from each other, another seed differs.
    first = await _sampled_ids(proxy, {"seed": 11}, 1.0)
    again = await _sampled_ids(proxy, {"seed": 11}, 1.0)
    other = await _sampled_ids(proxy, {"seed": 12}, 1.0)
    assert first == again
    assert first != other
    # The session's temperature replaces the calls' own: 0 decodes greedily whatever they ask.
    greedy = await _sampled_ids(proxy, {"temperature": 0.0}, 1.5)
    assert greedy == await _sampled_ids(proxy, {"temperature": 0.0, "seed": 3}, 0.7)


@pytest.mark.parametrize(
    "sampling",
    [
        pytest.param({"seed": -1}, id="negative-seed"),
        pytest.param({"seed": 2**63}, id="seed-beyond-int64"),
        pytest.param({"temperature": -0.5}, id="negative-temperature"),
        pytest.param({"seed": "1"}, id="seed-not-a-number"),
    ],
)
async def test_a_bad_session_sampling_is_a_400_naming_it(
    proxy: RunningProxy, sampling: dict[str, Any]
) -> None:
    response = await proxy.admin("/rl/start_session", {"sampling": sampling})
    assert response.status_code == 400, response.text
    assert "sampling" in response.text
