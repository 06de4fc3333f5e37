"""The adapter against a real proxy, beyond the standard suite and the matrix (test_standard.py,
test_matrix.py): the episode mode, agents-as-tools, tracing, and errors inside streams."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from agents import TracingProcessor, add_trace_processor
from oa_agents_for_tests import (
    FINAL_ANSWER,
    build_calculator,
    build_orchestrator,
    exact_match,
    run_it_myself,
)

from rltap.config import EpisodeConfig
from rltap.record import errors
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.rollout.workflow import Episode, OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing import RunningProxy
from rltap_openai_agents import OpenAIAgentsAdapter

ROW = {"question": "What is 2+3?", "answer": FINAL_ANSWER}
API_AND_STREAM = [
    pytest.param("chat", False, id="chat-json"),
    pytest.param("chat", True, id="chat-sse"),
    pytest.param("responses", False, id="responses-json"),
    pytest.param("responses", True, id="responses-sse"),
]


async def run_episode(proxy: RunningProxy, agent: Any) -> Episode:
    settings = WorkflowSettings(episodes=EpisodeConfig(discount=0.5))
    workflow = OpenAIProxyWorkflow(
        agent, proxy_addr=proxy.url, admin_key=proxy.admin_key, settings=settings
    )
    try:
        return await workflow.run_episode(ROW)
    finally:
        await workflow.aclose()


def in_order(episode: Episode) -> list[InteractionWithTokenLogpReward]:
    assert episode.error is None
    assert episode.interactions is not None
    return sorted(episode.interactions.values(), key=lambda interaction: interaction.created)


def assert_tool_loop_recorded(episode: Episode, *, route_prefix: str) -> None:
    """Two linked turns (tool call, then the answer), the reward on the answer, discounted back."""
    first, second = in_order(episode)
    assert first.interaction_id.startswith(route_prefix)
    assert first.parent_id is None
    assert second.parent_id == first.interaction_id
    (call,) = (first.output_message_list or [{}])[0]["tool_calls"]
    assert call["function"]["name"] == "calculate"
    assert second.output_text == FINAL_ANSWER
    assert (first.reward, second.reward) == (0.5, 1.0)
    for interaction in (first, second):
        response = interaction.model_response
        assert response is not None
        assert len(response.output_tokens) == len(response.output_logprobs) > 0


async def test_episode_function_runs_the_sdk_and_returns_the_reward(proxy: RunningProxy) -> None:
    episode = await run_episode(proxy, OpenAIAgentsAdapter(episode=run_it_myself))
    assert_tool_loop_recorded(episode, route_prefix="chatcmpl-")


async def test_agents_as_tools_reach_the_proxy_too(proxy: RunningProxy) -> None:
    agent = OpenAIAgentsAdapter(build_orchestrator, reward_fn=lambda result, data: 1.0)
    episode = await run_episode(proxy, agent)
    # The orchestrator calls the calculator agent, which calls its tool and answers; then the
    # orchestrator answers with that answer.
    assert [interaction.output_text for interaction in in_order(episode)] == [
        "",
        "",
        FINAL_ANSWER,
        f"Final answer: {FINAL_ANSWER}",
    ]


class RecordingProcessor(TracingProcessor):
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_trace_start(self, trace: Any) -> None:
        self.events.append("trace")

    def on_trace_end(self, trace: Any) -> None:
        self.events.append("trace end")

    def on_span_start(self, span: Any) -> None:
        self.events.append("span")

    def on_span_end(self, span: Any) -> None:
        self.events.append("span end")

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


_RECORDER = RecordingProcessor()
add_trace_processor(_RECORDER)  # once: the SDK offers no way to remove a processor again


@pytest.fixture
def trace_recorder() -> RecordingProcessor:
    _RECORDER.events.clear()
    return _RECORDER


async def test_only_the_proxy_is_called_and_nothing_is_traced(
    proxy: RunningProxy, trace_recorder: RecordingProcessor
) -> None:
    urls: list[httpx.URL] = []

    async def record(request: httpx.Request) -> None:
        urls.append(request.url)

    async with httpx.AsyncClient(event_hooks={"request": [record]}) as http:
        _, key = await proxy.start_session()
        agent = OpenAIAgentsAdapter(build_calculator, stream=True, reward_fn=exact_match)
        reward = await agent.run(ROW, base_url=proxy.base_url, api_key=key, http_client=http)
        assert not http.is_closed  # the workflow's client stays the workflow's
    assert reward == 1.0
    assert [str(url) for url in urls] == [f"{proxy.base_url}/chat/completions"] * 2
    assert trace_recorder.events == []


@pytest.mark.parametrize(("api", "stream"), API_AND_STREAM)
async def test_engine_error_surfaces_as_rltap_error(
    make_proxy: Any, api: Any, stream: bool
) -> None:
    proxy = await make_proxy(failures={1: errors.EngineError("engine fell over")})
    _, key = await proxy.start_session()
    agent = OpenAIAgentsAdapter(build_calculator, api=api, stream=stream, reward_fn=exact_match)
    with pytest.raises(errors.EngineError, match="engine fell over"):
        await agent.run(ROW, base_url=proxy.base_url, api_key=key, http_client=proxy.http)


async def test_without_a_proxy_the_adapter_says_what_to_set() -> None:
    agent = OpenAIAgentsAdapter(build_calculator)
    with pytest.raises(errors.InvalidRequest, match="OPENAI_BASE_URL"):
        await agent.run(ROW)


async def test_without_a_reward_fn_the_episode_gets_no_reward(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    agent = OpenAIAgentsAdapter(build_calculator, api="responses")
    assert await agent.run(ROW, base_url=proxy.base_url, api_key=key) is None
