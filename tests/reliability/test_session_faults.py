"""Faults around sessions: agents that fail or die, TTL reaping of slow agents, exports asked for
too early, and a proxy that restarts. Each gets the right answer, without a hang, and loses
nothing else.

Covered elsewhere, not repeated here: one agent that raises, and one worker that dies, rejected
with the pool recovering (tests/rollout/test_openai_proxy_workflow.py); idle sessions reaped and
exportable for the grace period, then forgotten; a session in steady use never reaped; an export
that waits for the end or answers 409 after its wait (tests/proxy/test_sessions.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fault_agents import FaultyAgent
from reliability_support import HOLD, HeldEngine, MakeProxy, assert_error, poll

from rltap.chat.renderer import ChatRenderer
from rltap.client.proxy import OpenAIProxyClient
from rltap.config import EpisodeConfig
from rltap.config.serve import LimitsConfig, ServeConfig
from rltap.proxy.app import create_app
from rltap.proxy.server import ProxyServer
from rltap.proxy.state import SessionState
from rltap.record import errors
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings, resolve_workflow
from rltap.testing.proxy import TEST_ADMIN_KEY, RunningProxy

AGENTS = f"{Path(__file__).with_name('fault_agents.py')}:FaultyAgent"
DEADLINE = 60.0  # no episode or request here may take longer: a hang fails the test
CHAT = "/v1/chat/completions"


def chat_body(text: str) -> dict[str, Any]:
    return {"model": "instant", "messages": [{"role": "user", "content": text}]}


async def chat(proxy: RunningProxy, key: str, text: str) -> str:
    response = await proxy.session_post(key, CHAT, chat_body(text))
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


class ExportLog:
    """An HTTP client for workflows that notes the sessions started and the exports received."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.exports: dict[str, dict[str, Any]] = {}
        self.http = httpx.AsyncClient(timeout=120, event_hooks={"response": [self._note]})

    async def _note(self, response: httpx.Response) -> None:
        path = response.request.url.path
        if response.status_code != 200 or path not in ("/rl/start_session", "/export_trajectories"):
            return
        await response.aread()
        body = response.json()
        if path == "/rl/start_session":
            self.started.append(body["session_id"])
        else:
            self.exports[body["session_id"]] = body


@pytest.fixture
async def export_log() -> AsyncIterator[ExportLog]:
    log = ExportLog()
    yield log
    await log.http.aclose()


def workflow(proxy: RunningProxy, log: ExportLog, agent: Any = AGENTS, **episodes: Any) -> Any:
    """`agent`'s workflow, its episodes discounted by 0.5 and run as `episodes` says
    (`EpisodeConfig`'s fields), one at a time."""
    made = resolve_workflow(
        agent,
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=WorkflowSettings(episodes=EpisodeConfig(discount=0.5, concurrency=1, **episodes)),
        http_client=log.http,
    )
    assert isinstance(made, OpenAIProxyWorkflow)
    return made


def assert_all_freed(proxy: RunningProxy, session_ids: list[str]) -> None:
    """No slot is held and every session is gone (exported, or never kept)."""
    assert session_ids
    assert proxy.state.store.open_sessions == 0
    for session_id in session_ids:
        with pytest.raises(errors.NotFound):
            proxy.state.store.get(session_id)


# --- agents that fail -----------------------------------------------------------------------


async def test_agents_that_fail_lose_nothing_of_the_others_running_beside_them(
    proxy: RunningProxy, export_log: ExportLog
) -> None:
    flow = workflow(proxy, export_log)
    rows = [
        {"name": "ok-1", "turns": 2, "reward": 1.0},
        {"name": "raise-late", "turns": 2, "fail": "raise"},
        {"name": "ok-2", "turns": 3, "reward": 0.5},
        {"name": "raise-early", "turns": 0, "fail": "raise"},
        {"name": "ok-3", "turns": 1, "reward": 2.0},
    ]
    async with asyncio.timeout(DEADLINE):
        episodes = await asyncio.gather(*(flow.run_episode(row) for row in rows))
    await flow.aclose()

    assert flow.failures == 2
    for row, episode in zip(rows, episodes, strict=True):
        if row.get("fail"):
            assert episode.interactions is None
            assert episode.error == f"AgentBroke: agent broke after {row['turns']} turns"
            continue
        assert episode.interactions is not None
        nodes = list(episode.interactions.values())
        assert len(nodes) == row["turns"]
        assert nodes[0].messages[0]["content"] == f"{row['name']} turn 0"
        rewards = [row["reward"] * 0.5 ** (len(nodes) - 1 - k) for k in range(len(nodes))]
        assert [node.reward for node in nodes] == pytest.approx(rewards)
    # The rejected episodes' calls were exported (and dropped by the workflow), then freed.
    late = next(e for r, e in zip(rows, episodes, strict=True) if r["name"] == "raise-late")
    assert len(export_log.exports[late.session_id]["interactions"]) == 2
    assert sorted(export_log.exports) == sorted(export_log.started)
    assert_all_freed(proxy, export_log.started)


async def test_a_subprocess_agent_that_dies_mid_call_is_rejected_and_its_call_aborted(
    make_proxy: MakeProxy, held_engine: HeldEngine, export_log: ExportLog
) -> None:
    proxy = await make_proxy()
    flow = workflow(proxy, export_log, mode="subproc")
    try:
        async with asyncio.timeout(2 * DEADLINE):
            died = await flow.run_episode({"name": "dies", "turns": 1, "fail": "die-mid-call"})
            after = await flow.run_episode({"name": "next", "turns": 2, "reward": 1.0})
    finally:
        await flow.aclose()

    assert died.interactions is None
    assert died.error is not None
    assert died.error.startswith("EpisodeFailed: the agent's worker process died")
    # The proxy saw the connection go and aborted the generation, well before its 200 tokens.
    export = export_log.exports[died.session_id]
    assert len(export["interactions"]) == 1
    assert [item["status"] for item in export["not_exported"]] == ["aborted"]
    assert held_engine.streams_closed_early == 1
    assert held_engine.trickled < 150
    assert after.interactions is not None
    assert len(after.interactions) == 2
    assert_all_freed(proxy, export_log.started)


# --- TTL ------------------------------------------------------------------------------------

REAPED = SessionState.REAPED
FAST_TTL = LimitsConfig(capacity=16, session_ttl=0.3, reap_interval=0.05, export_grace=60)


async def test_a_call_longer_than_the_ttl_keeps_its_session_alive(
    make_proxy: MakeProxy, held_engine: HeldEngine
) -> None:
    proxy = await make_proxy(limits=FAST_TTL)
    store = proxy.state.store
    slow_id, slow_key = await proxy.start_session()
    idle_id, idle_key = await proxy.start_session()
    first = await chat(proxy, slow_key, "first")
    idle_reply = await chat(proxy, idle_key, "only one")
    held = asyncio.create_task(proxy.session_post(slow_key, CHAT, chat_body(f"{HOLD} think")))
    await poll(lambda: held_engine.held == 1, 10, "the engine to hold the call")

    # The idle session is reaped: the TTL passed with the reaper running ...
    await poll(lambda: store.get(idle_id).state is REAPED, 10, "the reaper")
    # ... but not the one whose call is still running.
    assert store.get(slow_id).state is SessionState.ACTIVE
    held_engine.release()
    response = await asyncio.wait_for(held, DEADLINE)
    assert response.status_code == 200, response.text

    # Once idle it is reaped too; both keep their completed calls for the grace period.
    await poll(lambda: store.get(slow_id).state is REAPED, 10, "the reaper")
    assert_error(CHAT, await proxy.session_post(slow_key, CHAT, chat_body("late")), 410)
    export = await proxy.export(slow_id, wait_timeout=0)
    assert export["state"] == "reaped"
    assert [i["interaction_id"] for i in export["interactions"]] == [first, response.json()["id"]]
    assert export["not_exported"] == []
    export = await proxy.export(idle_id, wait_timeout=0)
    assert [i["interaction_id"] for i in export["interactions"]] == [idle_reply]
    assert_all_freed(proxy, [slow_id, idle_id])


async def test_an_agent_slower_than_the_ttl_is_rejected_and_its_calls_stay_exportable(
    make_proxy: MakeProxy, export_log: ExportLog
) -> None:
    proxy = await make_proxy(limits=FAST_TTL)
    agent = FaultyAgent()
    agent.resume = asyncio.Event()
    flow = workflow(proxy, export_log, agent=agent)
    episode = asyncio.create_task(flow.run_episode({"name": "slow", "turns": 2, "fail": "wait"}))

    def reaped() -> bool:
        store = proxy.state.store
        return bool(export_log.started) and store.get(export_log.started[0]).state is REAPED

    await poll(reaped, 10, "the slow agent's session to be reaped")
    agent.resume.set()  # its next call meets a reaped session
    result = await asyncio.wait_for(episode, DEADLINE)
    await flow.aclose()

    assert result.interactions is None
    assert result.error is not None
    assert "Error code: 410" in result.error
    assert "has reaped" in result.error
    export = export_log.exports[result.session_id]
    assert export["state"] == "reaped"
    assert len(export["interactions"]) == 2  # what it did before the TTL ran out
    assert_all_freed(proxy, export_log.started)


# --- exports asked for before the end -------------------------------------------------------


async def test_an_export_waits_for_a_call_still_running_after_the_end(
    proxy: RunningProxy, held_engine: HeldEngine
) -> None:
    session_id, key = await proxy.start_session()
    first = await chat(proxy, key, "first")
    held = asyncio.create_task(proxy.session_post(key, CHAT, chat_body(f"{HOLD} last words")))
    await poll(lambda: held_engine.held == 1, 10, "the engine to hold the call")
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = asyncio.create_task(
        proxy.admin("/export_trajectories", {"session_id": session_id, "wait_timeout": 30})
    )
    done, _ = await asyncio.wait({export}, timeout=0.3)
    assert not done, "the export did not wait for the call in flight"

    held_engine.release()
    last = (await asyncio.wait_for(held, DEADLINE)).json()["id"]
    response = await asyncio.wait_for(export, DEADLINE)
    assert response.status_code == 200, response.text
    assert [i["interaction_id"] for i in response.json()["interactions"]] == [first, last]
    assert response.json()["not_exported"] == []


async def test_an_export_that_outwaits_its_timeout_reports_the_running_call(
    proxy: RunningProxy, held_engine: HeldEngine
) -> None:
    session_id, key = await proxy.start_session()
    first = await chat(proxy, key, "first")
    held = asyncio.create_task(proxy.session_post(key, CHAT, chat_body(f"{HOLD} last words")))
    await poll(lambda: held_engine.held == 1, 10, "the engine to hold the call")
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200

    started = time.monotonic()
    export = await proxy.export(session_id, wait_timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 10
    assert [i["interaction_id"] for i in export["interactions"]] == [first]
    (running,) = export["not_exported"]
    assert running["status"] == "in_flight"
    response = await proxy.admin("/export_trajectories", {"session_id": session_id})
    assert_error("/export_trajectories", response, 404)  # exported once, then freed

    # The call still gets its reply; it is the one reported as not exported.
    held_engine.release()
    reply = await asyncio.wait_for(held, DEADLINE)
    assert reply.status_code == 200, reply.text
    assert reply.json()["id"] == running["interaction_id"]
    assert_all_freed(proxy, [session_id])


# --- restart --------------------------------------------------------------------------------


async def test_after_a_restart_old_keys_are_401_and_nothing_of_before_survives(
    renderer: ChatRenderer, held_engine: HeldEngine
) -> None:
    config = ServeConfig(limits=LimitsConfig(model_name="instant"))
    admin = {"authorization": f"Bearer {TEST_ADMIN_KEY}"}
    async with httpx.AsyncClient(timeout=30) as http:
        app = create_app(held_engine, renderer, config, admin_key=TEST_ADMIN_KEY)
        async with ProxyServer(app) as server:
            port = server.port
            proxy = RunningProxy(server.url, TEST_ADMIN_KEY, app.state.rltap, http)
            done_id, done_key = await proxy.start_session()
            await chat(proxy, done_key, "finished before")
            assert (await proxy.session_post(done_key, "/rl/end_session")).status_code == 200
            assert len((await proxy.export(done_id))["interactions"]) == 1
            trainer = OpenAIProxyClient(server.url, TEST_ADMIN_KEY, http_client=http)
            await trainer.start_session()
            assert trainer.api_key is not None
            agent = openai.AsyncOpenAI(
                base_url=trainer.base_url, api_key=trainer.api_key, max_retries=0
            )
            await agent.chat.completions.create(
                model="instant", messages=[{"role": "user", "content": "a"}]
            )

        # Down: the agent's call fails at once, it does not hang.
        with pytest.raises(openai.APIConnectionError):
            async with asyncio.timeout(DEADLINE):
                await agent.chat.completions.create(
                    model="instant", messages=[{"role": "user", "content": "b"}]
                )

        # Up again on the same port with a new app: all a new process would have.
        again = create_app(held_engine, renderer, config, admin_key=TEST_ADMIN_KEY)
        async with ProxyServer(again, port=port) as server:
            async with asyncio.timeout(DEADLINE):
                with pytest.raises(openai.AuthenticationError):
                    await agent.chat.completions.create(
                        model="instant", messages=[{"role": "user", "content": "c"}]
                    )
                with pytest.raises(errors.AuthenticationError):
                    await trainer.set_last_reward(1.0)
                with pytest.raises(errors.AuthenticationError):
                    await trainer.end_session()
                with pytest.raises(errors.NotFound):
                    await trainer.export_interactions()
                for session_id in (done_id, trainer.session_id):
                    response = await http.post(
                        f"{server.url}/export_trajectories",
                        json={"session_id": session_id},
                        headers=admin,
                    )
                    assert_error("/export_trajectories", response, 404)
                # The restarted proxy serves new sessions as usual.
                async with OpenAIProxyClient(server.url, TEST_ADMIN_KEY, http_client=http) as new:
                    assert new.api_key is not None
                    response = await http.post(
                        f"{server.url}{CHAT}",
                        json=chat_body("fresh"),
                        headers={"authorization": f"Bearer {new.api_key}"},
                    )
                    assert response.status_code == 200, response.text
        await agent.close()
