"""OpenAIProxyWorkflow on a real proxy: agents on the plain openai SDK, inline and subprocess."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from rltap.config import EpisodeConfig
from rltap.record.errors import NotFound
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.rollout.workflow import (
    Mode,
    OpenAIProxyWorkflow,
    WorkflowError,
    WorkflowSettings,
    resolve_workflow,
)
from rltap.testing.proxy import RunningProxy

MODES = [pytest.param("inline", id="inline"), pytest.param("subproc", id="subproc")]
# Generous: the first subprocess episode of a pool pays for starting its worker.
EPISODE_DEADLINE = 60.0


class Workflows:
    """Makes workflows for agents of `agents/chat_agents.py` on one proxy.

    They share an HTTP client that notes every session the workflows start, so a test can check
    that each one was ended and exported (freed) whatever happened to its episode.
    """

    def __init__(self, proxy: RunningProxy, agent_spec: Callable[[str], str]) -> None:
        self.proxy = proxy
        self.agent_spec = agent_spec
        self.started: list[str] = []
        self.made: list[OpenAIProxyWorkflow] = []
        self.http = httpx.AsyncClient(timeout=120, event_hooks={"response": [self._note_session]})

    async def _note_session(self, response: httpx.Response) -> None:
        if response.request.url.path == "/rl/start_session" and response.status_code == 200:
            await response.aread()
            self.started.append(response.json()["session_id"])

    def make(self, agent: str = "ChatAgent", **episodes: Any) -> OpenAIProxyWorkflow:
        """A workflow whose episodes run as `episodes` says (`EpisodeConfig`'s fields), one at
        a time: a subprocess pool of one worker."""
        settings = WorkflowSettings(episodes=EpisodeConfig(concurrency=1, **episodes))
        workflow = resolve_workflow(
            self.agent_spec(agent),
            proxy_addr=self.proxy.url,
            admin_key=self.proxy.admin_key,
            settings=settings,
            http_client=self.http,
        )
        assert isinstance(workflow, OpenAIProxyWorkflow)
        self.made.append(workflow)
        return workflow

    def assert_all_freed(self) -> None:
        """Every session started was ended and exported: no slot held, every id gone."""
        assert self.started
        assert self.proxy.state.store.open_sessions == 0
        for session_id in self.started:
            with pytest.raises(NotFound):
                self.proxy.state.store.get(session_id)

    async def aclose(self) -> None:
        for workflow in self.made:
            await workflow.aclose()
        await self.http.aclose()


@pytest.fixture
async def workflows(
    proxy: RunningProxy, agent_spec: Callable[[str], str]
) -> AsyncIterator[Workflows]:
    made = Workflows(proxy, agent_spec)
    yield made
    await made.aclose()


def conversation(interactions: dict[str, InteractionWithTokenLogpReward]) -> list[Any]:
    """The interactions of one linear conversation, root first."""
    (root,) = [node for node in interactions.values() if node.parent_id is None]
    chain = [root]
    while children := [n for n in interactions.values() if n.parent_id == chain[-1].interaction_id]:
        (child,) = children
        chain.append(child)
    assert len(chain) == len(interactions)
    return chain


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("returns", "expected_rewards"),
    [
        # discount 0.5: the first reply gets 0.5 x its child's reward on top of its own.
        pytest.param("reward", [0.4, 0.8], id="number-rewards-last-reply"),
        pytest.param("by_id", [0.8, 0.0], id="dict-rewards-those-replies"),
        pytest.param("none", [0.0, 0.0], id="none-rewards-nothing"),
    ],
)
async def test_agent_episode_comes_back_as_token_level_interactions(
    workflows: Workflows,
    caplog: pytest.LogCaptureFixture,
    mode: Mode,
    returns: str,
    expected_rewards: list[float],
) -> None:
    workflow = workflows.make(mode=mode, discount=0.5)
    row = {"question": "what is 2 + 2?", "returns": returns, "reward": 0.8}
    with caplog.at_level(logging.WARNING, logger="rltap.rollout.workflow"):
        async with asyncio.timeout(EPISODE_DEADLINE):
            interactions = await workflow.arun_episode(None, row)

    assert isinstance(interactions, dict)
    first, second = conversation(interactions)
    assert first.output_text == "Turn 0: you said: what is 2 + 2? (turn 0)"
    assert second.output_text == "Turn 1: you said: what is 2 + 2? (turn 1)"
    assert second.messages[-1] == {"role": "user", "content": "what is 2 + 2? (turn 1)"}
    assert [node.reward for node in (first, second)] == pytest.approx(expected_rewards)
    for node in (first, second):
        tensors = node.to_tensor_dict()
        generated = int(tensors["loss_mask"].sum())
        assert generated > 0
        assert tensors["input_ids"].shape[1] > generated
        output_logprobs = tensors["logprobs"][tensors["loss_mask"].bool()]
        assert all(math.isfinite(x) and x < 0 for x in output_logprobs.tolist())
        assert set(tensors["versions"][tensors["loss_mask"].bool()].tolist()) == {0}
    warned = "no reward assigned" in caplog.text
    assert warned == (returns == "none")
    assert workflow.failures == 0
    workflows.assert_all_freed()


@pytest.mark.parametrize(
    ("returns", "error", "message"),
    [
        pytest.param(
            "text", WorkflowError, r"returned str; return a number .* or None", id="a-string"
        ),
        pytest.param(
            "unknown_id",
            NotFound,
            r"no interaction 'chatcmpl-not-in-this-session' in this session",
            id="an-unknown-interaction-id",
        ),
    ],
)
async def test_a_reward_that_cannot_be_assigned_is_a_clear_error(
    workflows: Workflows, returns: str, error: type[Exception], message: str
) -> None:
    workflow = workflows.make(mode="inline")
    with pytest.raises(error, match=message):
        await workflow.run_episode({"question": "q", "returns": returns, "reward": 1})
    workflows.assert_all_freed()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("fail", "error"),
    [
        pytest.param("raise", "AgentBroke: agent broke on 'q'", id="own-exception"),
        # The SDK's errors do not unpickle; in a worker they come back as AgentError.
        pytest.param("api-error", "BadRequestError: Error code: 400", id="sdk-error"),
    ],
)
async def test_an_agent_exception_rejects_the_episode_and_frees_its_session(
    workflows: Workflows,
    caplog: pytest.LogCaptureFixture,
    mode: Mode,
    fail: str,
    error: str,
) -> None:
    workflow = workflows.make(mode=mode)
    row = {"question": "q", "fail": fail}
    with caplog.at_level(logging.WARNING, logger="rltap.rollout.workflow"):
        async with asyncio.timeout(EPISODE_DEADLINE):
            episode = await workflow.run_episode(row)
            rejected = await workflow.arun_episode(None, row)

    assert episode.interactions is None
    assert episode.error is not None
    assert error in episode.error
    assert rejected is None
    assert workflow.failures == 2
    assert f"episode rejected: the agent failed: {episode.error}" in caplog.text
    workflows.assert_all_freed()


async def test_a_worker_that_dies_or_exits_rejects_its_episode_and_the_pool_recovers(
    workflows: Workflows,
) -> None:
    workflow = workflows.make(mode="subproc")
    async with asyncio.timeout(2 * EPISODE_DEADLINE):
        died = await workflow.run_episode({"question": "q", "fail": "exit"})
        exited = await workflow.run_episode({"question": "q", "fail": "sys-exit"})
        after = await workflow.run_episode({"question": "next", "reward": 1.0})

    assert died.interactions is None
    assert died.error is not None
    assert died.error.startswith("EpisodeFailed: the agent's worker process died")
    # SystemExit in a worker ends that episode, not the process that runs the workflow.
    assert exited.interactions is None
    assert exited.error == "AgentError: builtins.SystemExit: 3"
    assert after.error is None
    assert after.interactions is not None
    _, last = conversation(after.interactions)
    assert last.output_text == "Turn 1: you said: next (turn 1)"
    assert last.reward == 1.0
    assert workflow.failures == 2
    workflows.assert_all_freed()


async def test_episodes_sharing_a_worker_never_see_each_others_keys(
    proxy: RunningProxy,
    workflows: Workflows,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # The worker inherits this environment when it starts: a key set before any episode.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-before")
    for key in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    record = tmp_path / "environments.jsonl"
    workflow = workflows.make("EnvProbe", mode="subproc")
    rows = [{"question": name, "record": str(record), "reward": 1.0} for name in ("a", "b")]

    async with asyncio.timeout(EPISODE_DEADLINE):
        episodes = await asyncio.gather(*(workflow.run_episode(row) for row in rows))

    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert len({line["pid"] for line in lines}) == 1  # one worker ran both episodes
    assert [line["when"] for line in lines] == ["during", "after", "during", "after"]
    during = {line["name"]: line["env"] for line in lines if line["when"] == "during"}
    for env in during.values():
        assert env["OPENAI_BASE_URL"] == proxy.base_url
        assert env["ANTHROPIC_BASE_URL"] == proxy.url
        assert env["ANTHROPIC_API_KEY"] == env["OPENAI_API_KEY"] != "sk-set-before"
    assert during["a"]["OPENAI_API_KEY"] != during["b"]["OPENAI_API_KEY"]
    for line in lines:
        if line["when"] == "after":
            assert line["env"] == {
                "OPENAI_BASE_URL": None,
                "OPENAI_API_KEY": "sk-set-before",
                "ANTHROPIC_BASE_URL": None,
                "ANTHROPIC_API_KEY": None,
            }
    # Each agent's call, made with the key it found in the environment, is in its own session.
    for row, episode in zip(rows, episodes, strict=True):
        assert episode.interactions is not None
        (node,) = episode.interactions.values()
        assert node.messages == [{"role": "user", "content": row["question"]}]
        assert node.reward == 1.0
    workflows.assert_all_freed()


async def test_a_sync_agent_runs_in_subprocess_mode(workflows: Workflows) -> None:
    workflow = workflows.make("SyncChatAgent", mode="subproc")
    async with asyncio.timeout(EPISODE_DEADLINE):
        interactions = await workflow.arun_episode(None, {"question": "sync?", "reward": 0.5})

    assert isinstance(interactions, dict)
    (node,) = interactions.values()
    assert node.output_text == "Turn 0: you said: sync?"
    assert node.reward == 0.5
    workflows.assert_all_freed()


def with_timeout(settings: WorkflowSettings, seconds: float) -> WorkflowSettings:
    return replace(settings, episodes=replace(settings.episodes, episode_timeout=seconds))


@pytest.mark.parametrize("mode", MODES)
async def test_a_slow_episode_is_rejected_at_its_timeout(workflows: Workflows, mode: Mode) -> None:
    workflow = workflows.make(mode=mode, episode_timeout=EPISODE_DEADLINE)
    async with asyncio.timeout(3 * EPISODE_DEADLINE):
        # The first episode starts the subprocess worker, outside the short timeout below.
        assert (await workflow.run_episode({"question": "warm", "reward": 1.0})).error is None
        workflow.settings = with_timeout(workflow.settings, 1.0)
        started = asyncio.get_running_loop().time()
        slow = await workflow.run_episode({"question": "slow", "fail": "hang"})
        waited = asyncio.get_running_loop().time() - started
        workflow.settings = with_timeout(workflow.settings, EPISODE_DEADLINE)
        # With one worker, this only runs once the slow agent noticed its session is gone.
        after = await workflow.run_episode({"question": "after", "reward": 1.0})

    assert slow.interactions is None
    assert slow.error is not None
    assert slow.error == "TimeoutError: the episode ran past its timeout of 1 s"
    assert 1.0 <= waited < 20.0  # the agent alone would go on for a minute
    workflows.assert_all_freed()
    assert after.error is None
    assert after.interactions is not None
    assert workflow.failures == 1
