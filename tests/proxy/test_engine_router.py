"""One proxy over several engines (`--url A,B`), through the real proxy (uvicorn on 127.0.0.1)
over real servers (`FakeVLLM`s on 127.0.0.1).

What a client sees: a session's calls all reach one engine; when that engine crashes during a
call, the call gets a 503 in its API's own error format (OpenAI's on chat completions and
responses, Anthropic's on messages; an error event in a stream), and the session's next call
succeeds on another engine; the engine is back in rotation once it answers again. `/metrics`
shows each engine's requests in flight, sessions, calls, health and version, by address; an
ended session leaves its engine's count. `rltap serve` refuses a dead address at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from rltap.chat.renderer import ChatRenderer
from rltap.engines.router import EngineRouter
from rltap.engines.vllm import VLLMEngine
from rltap.proxy import ProxyServer, create_app
from rltap.record.errors import EngineUnavailable
from rltap.testing.fakes import FakeVLLM
from rltap.testing.proxy import TEST_ADMIN_KEY, RunningProxy, start_test_proxy

CHAT = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
RESPONSES = ("/v1/responses", {"input": "hi"})
MESSAGES = ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}]})


@contextlib.asynccontextmanager
async def routed_proxy(
    renderer: ChatRenderer, count: int = 2
) -> AsyncIterator[tuple[RunningProxy, list[FakeVLLM]]]:
    async with contextlib.AsyncExitStack() as stack:
        fakes = [await stack.enter_async_context(FakeVLLM()) for _ in range(count)]
        engines = [VLLMEngine(fake.url) for fake in fakes]
        router = EngineRouter(engines, health_interval=0.05)
        proxy = await stack.enter_async_context(start_test_proxy(router, renderer))
        yield proxy, fakes


async def call(proxy: RunningProxy, key: str, route: tuple[str, dict[str, Any]]) -> Any:
    path, body = route
    return await proxy.session_post(key, path, {"model": "fake", "max_tokens": 16, **body})


def engine_metrics(text: str) -> dict[str, dict[str, float]]:
    """`{metric name: {engine address: value}}` of the per-engine families."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("rltap_engine_"):
                found.setdefault(sample.name, {})[sample.labels["engine"]] = sample.value
    return found


async def wait_for(condition: Any, seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    ("route", "error_of"),
    [
        pytest.param(CHAT, lambda body: body["error"], id="openai-chat"),
        pytest.param(RESPONSES, lambda body: body["error"], id="openai-responses"),
        pytest.param(MESSAGES, lambda body: body["error"], id="anthropic-messages"),
    ],
)
async def test_an_engine_crashing_mid_call_is_a_503_and_the_session_moves_on(
    renderer: ChatRenderer, route: tuple[str, dict[str, Any]], error_of: Any
) -> None:
    async with routed_proxy(renderer) as (proxy, fakes):
        _, key = await proxy.start_session()
        assert (await call(proxy, key, route)).status_code == 200
        home = next(fake for fake in fakes if fake.completions == 1)
        other = next(fake for fake in fakes if fake is not home)
        home.delay = 5.0
        in_flight = asyncio.create_task(call(proxy, key, route))
        await wait_for(lambda: home.controls.running)
        await home.kill()
        failed = await in_flight
        assert failed.status_code == 503, failed.text
        error = error_of(failed.json())
        assert home.url in error["message"]
        assert "retry" in error["message"]
        if route is MESSAGES:
            assert failed.json()["type"] == "error"
            assert error["type"] == "overloaded_error"
        else:
            assert error["code"] == "engine_unavailable"
        again = await call(proxy, key, route)
        assert again.status_code == 200, again.text
        assert other.completions == 1
        home.delay = 0.0
        await home.start()
        await wait_for(lambda: all(load.healthy for load in proxy.state.engine.loads()))  # type: ignore[attr-defined]
        _, fresh = await proxy.start_session()
        assert (await call(proxy, fresh, route)).status_code == 200
        assert home.completions == 2  # the new session went to the engine with none


async def test_a_stream_cut_by_a_crash_ends_with_an_error_event(renderer: ChatRenderer) -> None:
    async with routed_proxy(renderer) as (proxy, fakes):
        _, key = await proxy.start_session()
        path, body = CHAT
        request = {"model": "fake", "max_tokens": 16, "stream": True, **body}
        assert (await proxy.session_post(key, path, request)).status_code == 200
        home = next(fake for fake in fakes if fake.completions == 1)
        home.delay = 5.0
        stream = asyncio.create_task(proxy.session_post(key, path, request))
        await wait_for(lambda: home.controls.running)
        await home.kill()
        reply = await stream
        assert reply.status_code == 200  # the stream had begun: the error is its last event
        events = [line for line in reply.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        error = json.loads(events[-2].removeprefix("data: "))["error"]
        assert error["code"] == "engine_unavailable"
        assert home.url in error["message"]
        assert (await proxy.session_post(key, path, request)).status_code == 200


async def test_metrics_show_each_engines_load_and_an_ended_session_leaves(
    renderer: ChatRenderer,
) -> None:
    async with routed_proxy(renderer, count=3) as (proxy, fakes):
        keys = [(await proxy.start_session())[1] for _ in range(4)]
        for key in keys:
            assert (await call(proxy, key, CHAT)).status_code == 200
        fakes[2].healthy = False
        await wait_for(lambda: not proxy.state.engine.loads()[2].healthy)  # type: ignore[attr-defined]
        metrics = engine_metrics((await proxy.http.get(f"{proxy.url}/metrics")).text)
        addresses = {fake.url for fake in fakes}
        assert set(metrics["rltap_engine_sessions"]) == addresses
        assert sorted(metrics["rltap_engine_sessions"].values()) == [1, 1, 2]
        assert sum(metrics["rltap_engine_calls_total"].values()) == 4
        assert metrics["rltap_engine_requests_in_flight"] == dict.fromkeys(addresses, 0)
        assert metrics["rltap_engine_healthy"] == {
            fakes[0].url: 1,
            fakes[1].url: 1,
            fakes[2].url: 0,
        }
        assert metrics["rltap_engine_version"] == dict.fromkeys(addresses, 0)
        assert (await proxy.session_post(keys[0], "/rl/end_session", {})).status_code == 200
        after = engine_metrics((await proxy.http.get(f"{proxy.url}/metrics")).text)
        assert sum(after["rltap_engine_sessions"].values()) == 3


def free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@contextlib.asynccontextmanager
async def app_over_a_dead_address(
    renderer: ChatRenderer,
) -> AsyncIterator[tuple[FastAPI, str, str]]:
    """The proxy's app over a live fake and a dead address, not started: (app, live, dead)."""
    dead = free_address()
    async with FakeVLLM() as live:
        router = EngineRouter([VLLMEngine(live.url), VLLMEngine(dead)])
        yield create_app(router, renderer, admin_key=TEST_ADMIN_KEY), live.url, dead


async def test_a_proxy_over_a_dead_address_does_not_start_and_says_which(
    renderer: ChatRenderer,
) -> None:
    async with app_over_a_dead_address(renderer) as (app, live, dead):
        with pytest.raises(EngineUnavailable, match="not answering at start") as caught:
            async with app.router.lifespan_context(app):  # what uvicorn runs before serving
                pass
    error = app.state.rltap.startup_error
    assert error is caught.value
    assert dead in error.message
    assert live not in error.message


async def test_a_proxy_server_raises_why_its_engine_did_not_start(
    renderer: ChatRenderer,
) -> None:
    async with app_over_a_dead_address(renderer) as (app, _, _):
        with pytest.raises(EngineUnavailable, match="not answering at start"):
            async with ProxyServer(app):  # what rltap rollout and train serve through
                pass


@pytest.mark.slow
def test_serve_refuses_a_dead_address_at_start(tiny_model_dir: Path) -> None:
    dead = free_address()
    port = free_address().rsplit(":", 1)[1]
    command = [
        sys.executable, "-m", "rltap.cli", "serve", "--port", port, "--engine", "vllm",
        "--url", f"http://127.0.0.1:9,{dead}", "--tokenizer", str(tiny_model_dir),
        "--admin-key", "admin-key-for-tests-0123456789",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2  # EXIT_ERROR: rltap's own error, its last line
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("rltap serve: engine servers not answering at start: ")
    assert dead in last
