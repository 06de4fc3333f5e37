"""`ChatAgent` (`step` and `astep`, with a tool, streamed or not) through the adapter, inline."""

from __future__ import annotations

from typing import Any

import pytest
from camel_episodes import EXPECTED, chat_astep, chat_step, score

from rltap.config import EpisodeConfig
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing import RunningProxy
from rltap_camel import CamelAdapter

EPISODES = [pytest.param(chat_step, id="step"), pytest.param(chat_astep, id="astep")]
STREAM = [pytest.param(False, id="json"), pytest.param(True, id="sse")]


def workflow_for(proxy: RunningProxy, agent: Any, discount: float = 1.0) -> OpenAIProxyWorkflow:
    settings = WorkflowSettings(episodes=EpisodeConfig(discount=discount))
    return OpenAIProxyWorkflow(
        agent,
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=settings,
        http_client=proxy.http,
    )


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("episode", EPISODES)
async def test_tool_loop_is_recorded_and_rewarded(
    proxy: RunningProxy, episode: Any, stream: bool
) -> None:
    agent = CamelAdapter(episode, reward_fn=score, stream=stream)
    workflow = workflow_for(proxy, agent, discount=0.5)
    result = await workflow.run_episode({"question": "What is 2 + 2?"})
    assert result.error is None
    assert result.interactions is not None
    call, answer = result.interactions.values()
    assert call.output_message_list is not None
    (tool_call,) = call.output_message_list[0]["tool_calls"]
    assert tool_call["function"]["name"] == "add"
    assert answer.parent_id == call.interaction_id
    assert answer.messages[-1]["role"] == "tool"
    assert answer.output_text == EXPECTED
    assert (answer.reward, call.reward) == (1.0, 0.5)
    for interaction in (call, answer):
        response = interaction.model_response
        assert response is not None
        assert len(response.output_tokens) == len(response.output_logprobs) > 0


async def test_result_without_reward_fn_is_the_reward(proxy: RunningProxy) -> None:
    def length_of_answer(data: Any, model: Any) -> float:
        return float(len(chat_step(data, model)))

    workflow = workflow_for(proxy, CamelAdapter(length_of_answer))
    result = await workflow.run_episode({"question": "What is 2 + 2?"})
    assert result.interactions is not None
    *_, answer = result.interactions.values()
    assert answer.reward == float(len(EXPECTED))


async def test_concurrent_episodes_stay_in_their_own_sessions(proxy: RunningProxy) -> None:
    import asyncio

    workflow = workflow_for(proxy, CamelAdapter(chat_step, reward_fn=score))
    results = await asyncio.gather(
        *(workflow.run_episode({"question": f"What is {n} + 2?"}) for n in range(4))
    )
    assert len({r.session_id for r in results}) == 4
    for n, result in enumerate(results):
        assert result.interactions is not None
        first, _ = result.interactions.values()
        assert first.messages[-1]["content"] == f"What is {n} + 2?"
