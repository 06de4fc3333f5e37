"""`RolePlaying` through the adapter: the task-specify agent and both role agents on the proxy."""

from __future__ import annotations

from typing import Any

import pytest
from camel_episodes import EXPECTED, TASK_SPECIFIER_SYSTEM, role_play, role_play_async, score

from rltap.config import EpisodeConfig
from rltap.record.types import InteractionWithTokenLogpReward, Link
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing import RunningProxy
from rltap_camel import CamelAdapter

# CAMEL's RolePlaying.astep reads a streamed step's result without awaiting it (0.2.90), so
# an async role play needs a non-streaming model; the sync step streams fine.
CASES = [
    pytest.param(role_play, False, id="step-json"),
    pytest.param(role_play, True, id="step-sse"),
    pytest.param(role_play_async, False, id="astep-json"),
]
TASK = {"task": "Add two and two for a grocery list"}


def system_prompt(interaction: InteractionWithTokenLogpReward) -> str:
    first = interaction.messages[0]
    assert first["role"] == "system"
    return str(first["content"])


def check_role_play(interactions: dict[str, InteractionWithTokenLogpReward]) -> None:
    """Task-specify call, the user agent's call, the assistant's tool call and its answer."""
    specify, user, call, answer = interactions.values()
    assert system_prompt(specify) == TASK_SPECIFIER_SYSTEM
    assert TASK["task"] in specify.messages[-1]["content"]
    specified_task = specify.output_text
    # The specified task (the script echoes the specify prompt) reaches both role agents.
    assert specified_task in system_prompt(user)
    assert specified_task in system_prompt(call)
    assert "Never forget you are a Student" in system_prompt(user)
    assert "Never forget you are a Math Tutor" in system_prompt(call)
    assert answer.parent_id == call.interaction_id
    assert answer.messages[-1]["role"] == "tool"
    assert answer.output_text == EXPECTED
    # One tree: each role agent carries the words it was given (the specified task in the
    # student's system prompt, the student's instruction in the tutor's first message).
    links = [(i.link, i.parent_id) for i in (specify, user, call)]
    assert links == [
        (Link.ROOT, None),
        (Link.CARRY, specify.interaction_id),
        (Link.CARRY, user.interaction_id),
    ]
    # The reward lands on the assistant's answer and flows back along the tree, halved a link.
    rewards = [i.reward for i in (specify, user, call, answer)]
    assert rewards == [0.125, 0.25, 0.5, 1.0]


@pytest.mark.parametrize(("episode", "stream"), CASES)
async def test_role_play_is_recorded_and_rewarded(
    proxy: RunningProxy, episode: Any, stream: bool
) -> None:
    agent = CamelAdapter(episode, reward_fn=score, stream=stream)
    workflow = OpenAIProxyWorkflow(
        agent,
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=WorkflowSettings(episodes=EpisodeConfig(discount=0.5)),
        http_client=proxy.http,
    )
    result = await workflow.run_episode(TASK)
    assert result.error is None
    assert result.interactions is not None
    check_role_play(result.interactions)
