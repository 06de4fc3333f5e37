"""`ChatOpenAI` and LCEL chains through the adapter, against a real proxy.

Every path the adapter offers (ainvoke; invoke in a thread; astream with stream_usage; Chat
Completions or Responses; JSON or SSE) must land in the episode's session with its tokens.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage
from lc_builders import build_chain, build_model, build_streamer, exact_match, expected_answer

from rltap.adapter import Api
from rltap.testing import RunningProxy
from rltap_langchain import LangChainAdapter, final_text

ROW = {"question": "What is 2+3?"}
APIS = ["chat", "responses"]


def _recording_client(paths: list[str]) -> httpx.AsyncClient:
    async def record(request: httpx.Request) -> None:
        paths.append(f"{request.url.path} {request.headers['authorization']}")

    return httpx.AsyncClient(timeout=60, event_hooks={"request": [record]})


@pytest.mark.parametrize("api", APIS)
async def test_requests_use_the_injected_url_key_and_client(proxy: RunningProxy, api: Api) -> None:
    session_id, key = await proxy.start_session()
    paths: list[str] = []
    adapter = LangChainAdapter(build_chain, api=api)
    async with _recording_client(paths) as client:
        answer = await adapter.run(ROW, base_url=proxy.base_url, api_key=key, http_client=client)
    route = "/v1/responses" if api == "responses" else "/v1/chat/completions"
    assert paths == [f"{route} Bearer {key}"]
    assert answer == expected_answer(ROW)
    await proxy.session_post(key, "/rl/end_session")
    (item,) = (await proxy.export(session_id))["interactions"]
    assert item["output_text"] == answer


# Every pair of (wire, transport, call style) once: four cases instead of eight.
@pytest.mark.parametrize(
    ("api", "stream", "sync"),
    [
        pytest.param("chat", False, False, id="chat-json-ainvoke"),
        pytest.param("chat", True, True, id="chat-sse-invoke"),
        pytest.param("responses", False, True, id="responses-json-invoke"),
        pytest.param("responses", True, False, id="responses-sse-ainvoke"),
    ],
)
async def test_chain_reply_is_recorded_with_its_tokens(
    run_episode: Any, api: Api, stream: bool, sync: bool
) -> None:
    adapter = LangChainAdapter(
        build_chain, api=api, stream=stream, sync=sync, reward_fn=exact_match
    )
    episode = await run_episode(adapter, ROW)
    assert episode.result == 1.0
    (item,) = episode.interactions
    assert item["output_text"] == expected_answer(ROW)
    assert item["parent_id"] is None
    assert item["input_len"] > 0
    assert item["output_len"] > 0
    # The system prompt and the question reached the model as separate messages.
    assert [m["role"] for m in item["messages"]] == ["system", "user"]


def _assert_reply_with_recorded_usage(episode: Any, text: str) -> None:
    """The reply is an AIMessage with `text`, and its usage is the recorded token counts."""
    assert isinstance(episode.result, AIMessage)
    assert final_text(episode.result) == text
    (item,) = episode.interactions
    usage = episode.result.usage_metadata
    assert usage is not None
    assert (usage["input_tokens"], usage["output_tokens"]) == (
        item["input_len"],
        item["output_len"],
    )


@pytest.mark.parametrize("api", APIS)
async def test_model_returns_a_message_with_usage(run_episode: Any, api: Api) -> None:
    adapter = LangChainAdapter(build_model, api=api)
    episode = await run_episode(adapter, "hello there")
    _assert_reply_with_recorded_usage(episode, "Turn 0: you said: hello there")


@pytest.mark.parametrize("api", APIS)
async def test_astream_with_stream_usage_reports_the_recorded_token_counts(
    run_episode: Any, api: Api
) -> None:
    adapter = LangChainAdapter(build_streamer, api=api)
    episode = await run_episode(adapter, "stream this")
    _assert_reply_with_recorded_usage(episode, "Turn 0: you said: stream this")
