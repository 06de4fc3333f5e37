"""Failures surface as rltap's error types; misuse fails with a message that names the fix."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from lc_builders import agent_input, build_agent, build_chain, expected_answer

from rltap.adapter import Api
from rltap.record import errors
from rltap.testing import RunningProxy
from rltap_langchain import LangChainAdapter

ROW = {"question": "What is 2+3?"}


@pytest.mark.parametrize(
    ("failure", "api", "stream"),
    [
        pytest.param(errors.EngineError, "chat", False, id="502-chat-json"),
        pytest.param(errors.EngineError, "chat", True, id="502-chat-sse"),
        pytest.param(errors.EngineUnavailable, "responses", False, id="503-responses-json"),
        pytest.param(errors.EngineTimeout, "responses", True, id="504-responses-sse"),
    ],
)
async def test_engine_error_surfaces_as_rltap_error(
    make_proxy: Any, failure: type[errors.EngineError], api: Api, stream: bool
) -> None:
    proxy: RunningProxy = await make_proxy(failures={1: failure})
    _, key = await proxy.start_session()
    # The tool call (turn 0) succeeds; the engine fails on the final answer (turn 1).
    adapter = LangChainAdapter(build_agent, api=api, stream=stream, input_fn=agent_input)
    with pytest.raises(errors.RltapError) as caught:
        await adapter.run(
            {"question": "2+3?"}, base_url=proxy.base_url, api_key=key, http_client=proxy.http
        )
    assert type(caught.value) is failure


async def test_unknown_session_key_is_an_authentication_error(proxy: RunningProxy) -> None:
    adapter = LangChainAdapter(build_chain)
    with pytest.raises(errors.AuthenticationError, match="401"):
        await adapter.run(
            ROW, base_url=proxy.base_url, api_key="sk-not-a-session", http_client=proxy.http
        )


async def test_connection_comes_from_the_environment_in_subprocess_mode(
    proxy: RunningProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, key = await proxy.start_session()
    monkeypatch.setenv("OPENAI_BASE_URL", proxy.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    assert await LangChainAdapter(build_chain).run(ROW) == expected_answer(ROW)


async def test_no_connection_names_both_ways_to_give_one() -> None:
    with pytest.raises(errors.InvalidRequest, match="OPENAI_BASE_URL and OPENAI_API_KEY"):
        await LangChainAdapter(build_chain).run(ROW)


def _not_a_runnable(llm: Any, data: Any) -> Any:
    return "prompt | llm"


async def test_build_must_return_a_runnable(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    adapter = LangChainAdapter(_not_a_runnable)
    with pytest.raises(TypeError, match="build returned str, not a Runnable"):
        await adapter.run(ROW, base_url=proxy.base_url, api_key=key, http_client=proxy.http)


async def test_unknown_run_arguments_are_refused(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    with pytest.raises(TypeError, match="temperature"):
        await LangChainAdapter(build_chain).run(
            ROW, base_url=proxy.base_url, api_key=key, temperature=0.5
        )


class _ModelCalls(BaseCallbackHandler):
    def __init__(self) -> None:
        self.replies: list[str] = []

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        self.replies.append(response.generations[0][0].text)


async def test_run_config_reaches_the_runnable(run_episode: Any) -> None:
    calls = _ModelCalls()
    episode = await run_episode(LangChainAdapter(build_chain), ROW, config={"callbacks": [calls]})
    assert calls.replies == [episode.result]
