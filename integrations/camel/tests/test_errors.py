"""Failures reach the workflow as rltap's errors, even where CAMEL would swallow them."""

from __future__ import annotations

from typing import Any

import pytest
from camel_episodes import chat_astep, chat_step, chat_step_on_the_loop, score

from rltap.record.errors import EngineError, SessionGone
from rltap.testing import RunningProxy, tool_loop
from rltap_camel import CamelAdapter

EPISODES = [pytest.param(chat_step, id="step"), pytest.param(chat_astep, id="astep")]
STREAM = [pytest.param(False, id="json"), pytest.param(True, id="sse")]
QUESTION = {"question": "What is 2 + 2?"}


async def run_inline(proxy: RunningProxy, agent: CamelAdapter, key: str) -> Any:
    return await agent.run(QUESTION, base_url=proxy.base_url, api_key=key, http_client=proxy.http)


@pytest.mark.parametrize("stream", STREAM)
@pytest.mark.parametrize("episode", EPISODES)
async def test_engine_error_surfaces_as_rltap_error(
    make_proxy: Any, episode: Any, stream: bool
) -> None:
    # CAMEL turns a failed streaming call into an "Error: ..." reply and returns normally.
    proxy = await make_proxy(failures={1: EngineError("the engine fell over")})
    _, key = await proxy.start_session()
    agent = CamelAdapter(episode, reward_fn=score, stream=stream)
    with pytest.raises(EngineError, match="the engine fell over"):
        await run_inline(proxy, agent, key)


@pytest.mark.parametrize("stream", STREAM)
async def test_ended_session_surfaces_as_session_gone(proxy: RunningProxy, stream: bool) -> None:
    _, key = await proxy.start_session()
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200
    agent = CamelAdapter(chat_astep, reward_fn=score, stream=stream)
    with pytest.raises(SessionGone):
        await run_inline(proxy, agent, key)


@pytest.mark.parametrize("stream", STREAM)
async def test_sync_step_on_the_event_loop_is_refused(proxy: RunningProxy, stream: bool) -> None:
    # Inline, the proxy answering that call runs on the very loop the call would block.
    _, key = await proxy.start_session()
    agent = CamelAdapter(chat_step_on_the_loop, stream=stream)
    with pytest.raises(RuntimeError, match="ran on the event loop thread"):
        await run_inline(proxy, agent, key)


class FailingOnce:
    """The tool-loop script, except that its very first reply fails."""

    def __init__(self) -> None:
        self.failed = False

    def __call__(self, messages: Any, tools: Any, turn: int) -> str:
        if not self.failed:
            self.failed = True
            raise EngineError("transient")
        return tool_loop(messages, tools, turn)


async def test_failure_followed_by_a_success_is_not_the_episode_s_failure(
    make_proxy: Any,
) -> None:
    proxy = await make_proxy(FailingOnce())
    _, key = await proxy.start_session()

    def retry_once(data: Any, model: Any) -> Any:
        try:
            return chat_step(data, model)
        except Exception:
            return chat_step(data, model)

    assert await run_inline(proxy, CamelAdapter(retry_once, reward_fn=score), key) == 1.0
