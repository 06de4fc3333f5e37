"""A two-agent role play on a real proxy whose run() returns {agent: reward}.

The student and the tutor relay each other's replies as user messages (CAMEL's role play), each
call naming its agent (`X-Rltap-Agent`). The proxy links them into one tree: S1 -> S2 and
S1 -> T1 -> T2 (each agent's conversation continues its own last call; the tutor's first call
carries the student's first reply).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from rltap.config import EpisodeConfig
from rltap.record.errors import InvalidRequest, NotFound
from rltap.record.pack import TreePack
from rltap.record.types import Link
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing.proxy import RunningProxy

STUDENT, TUTOR = "Student", "Math Tutor"
# Per agent, discount 0.5, mean over S1's two continuations: the tutor's 1.0 comes back from
# T2 to T1 (0.5); the student's 0.2 from S2 to S1 through the mean with T1's branch, where the
# student's pass has 0 (0.5 x (0.2 + 0) / 2).
PER_AGENT = {"S1": 0.05, "S2": 0.2, "T1": 0.5, "T2": 1.0}


class RolePlay:
    """Two turns each of a student and a tutor; returns what `data["returns"]` says, the names
    S1, S2, T1, T2 standing for those calls' interaction ids."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    async def run(
        self, data: dict[str, Any], base_url: str, api_key: str, http_client: Any, **_: Any
    ) -> Any:
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, http_client=http_client, max_retries=0
        )
        chats: dict[str, list[Any]] = {
            STUDENT: [{"role": "system", "content": "You are a student."}],
            TUTOR: [{"role": "system", "content": "You are a math tutor."}],
        }
        said = "Teach me how to add 2 and 2."
        for turn in (1, 2):
            for name, agent in ((f"S{turn}", STUDENT), (f"T{turn}", TUTOR)):
                chats[agent].append({"role": "user", "content": said})
                completion = await client.chat.completions.create(
                    model="tiny", messages=chats[agent], extra_headers={"X-Rltap-Agent": agent}
                )
                said = completion.choices[0].message.content or ""
                chats[agent].append({"role": "assistant", "content": said})
                self.ids[name] = completion.id
        return {self.ids.get(key, key): reward for key, reward in data["returns"].items()}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=120) as client:
        yield client


def workflow(
    proxy: RunningProxy, http: httpx.AsyncClient, agent: RolePlay, style: Any = "individual"
) -> OpenAIProxyWorkflow:
    settings = WorkflowSettings(episodes=EpisodeConfig(discount=0.5), style=style)
    return OpenAIProxyWorkflow(
        agent,
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=settings,
        http_client=http,
    )


async def rewards_by_call(
    proxy: RunningProxy, http: httpx.AsyncClient, returns: dict[str, float]
) -> dict[str, float]:
    agent = RolePlay()
    episode = await workflow(proxy, http, agent).run_episode({"returns": returns})
    assert episode.interactions is not None
    nodes = {name: episode.interactions[i] for name, i in agent.ids.items()}
    assert {name: node.agent_id for name, node in nodes.items()} == {
        "S1": STUDENT, "S2": STUDENT, "T1": TUTOR, "T2": TUTOR,
    }  # fmt: skip
    parents = {name: node.parent_id for name, node in nodes.items()}
    ids = agent.ids
    assert parents == {"S1": None, "S2": ids["S1"], "T1": ids["S1"], "T2": ids["T1"]}
    assert nodes["T1"].link is Link.CARRY
    return {name: float(node.reward or 0.0) for name, node in nodes.items()}


async def test_each_agent_gets_its_own_reward_discounted_along_the_tree(
    proxy: RunningProxy, http: httpx.AsyncClient
) -> None:
    per_agent = await rewards_by_call(proxy, http, {TUTOR: 1.0, STUDENT: 0.2})
    assert per_agent == pytest.approx(PER_AGENT)
    # The same rewards put on those calls by id are the episode's, shared along the tree.
    shared = await rewards_by_call(proxy, http, {"T2": 1.0, "S2": 0.2})
    assert shared == pytest.approx({"S1": 0.5 * (0.2 + 0.5) / 2, "S2": 0.2, "T1": 0.5, "T2": 1.0})
    assert proxy.state.store.open_sessions == 0


async def test_the_tree_pack_carries_each_agents_reward_on_its_tokens(
    proxy: RunningProxy, http: httpx.AsyncClient
) -> None:
    agent = RolePlay()
    episode = await workflow(proxy, http, agent, style="tree").run_episode(
        {"returns": {TUTOR: 1.0, STUDENT: 0.2}}
    )
    assert isinstance(episode.pack, TreePack)
    pack = episode.pack
    on_tokens = {}
    for name, interaction_id in agent.ids.items():
        generated = pack.interaction_index == pack.interaction_ids.index(interaction_id)
        assert generated.any()
        (on_tokens[name],) = np.unique(pack.rewards[generated]).tolist()
    assert on_tokens == pytest.approx(PER_AGENT)


async def test_an_agent_left_out_gets_zero_and_a_warning(
    proxy: RunningProxy, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rltap.rollout.workflow"):
        rewards = await rewards_by_call(proxy, http, {TUTOR: 1.0})
    assert rewards == pytest.approx({"S1": 0.0, "S2": 0.0, "T1": 0.5, "T2": 1.0})
    assert "agent.run gave agent 'Student' no reward: its calls get 0" in caplog.text


@pytest.mark.parametrize(
    ("returns", "error", "message"),
    [
        pytest.param(
            {TUTOR: 1.0, "Teacher": 0.5},
            NotFound,
            r"no interaction 'Teacher' in this session, nor an agent of its completed calls "
            r"\(agents: \['Math Tutor', 'Student'\]\)",
            id="unknown-key",
        ),
        pytest.param(
            {TUTOR: 1.0, "S2": 0.5},
            InvalidRequest,  # a 400 over HTTP: the client raises the status's error
            r"rewards mix interaction ids \('chatcmpl-\w+'\) and agents \('Math Tutor'\)",
            id="mixed-keys",
        ),
    ],
)
async def test_a_reward_key_of_neither_kind_or_of_both_kinds_is_an_error(
    proxy: RunningProxy,
    http: httpx.AsyncClient,
    returns: dict[str, float],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        await workflow(proxy, http, RolePlay()).run_episode({"returns": returns})
    assert proxy.state.store.open_sessions == 0  # the session was exported and freed anyway
