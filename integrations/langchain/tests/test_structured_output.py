"""LangChain's structured output against a real proxy whose embedded engine samples the tiny model
under the schema's grammar: `with_structured_output` (json_schema and function_calling) and
`create_agent(response_format=...)` give the pydantic model, on Chat Completions and Responses,
streamed or not, and every recorded call is marked constrained."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from lc_builders import (
    ONE_CALL,
    agent_input,
    build_forecast_agent,
    build_function_calling_forecaster,
    build_json_schema_forecaster,
    question_input,
)

from rltap.adapter import Api
from rltap.testing import RunningProxy
from rltap.testing.harness import embedded_proxy
from rltap.testing.structured import FORECAST_QUESTION, Forecast
from rltap_langchain import LangChainAdapter

ROW = {"question": FORECAST_QUESTION}


@pytest.fixture
async def proxy() -> AsyncIterator[RunningProxy]:
    """The embedded engine instead of the script: the grammar shapes the reply."""
    async with embedded_proxy(capacity=16) as running:
        yield running


def _parsed(result: Any) -> Any:
    return result


def _structured_response(result: Any) -> Any:
    return result["structured_response"]


WAYS = [
    pytest.param(build_json_schema_forecaster, question_input, _parsed, {}, id="json_schema"),
    pytest.param(
        build_function_calling_forecaster, question_input, _parsed, {}, id="function_calling"
    ),
    pytest.param(
        build_forecast_agent, agent_input, _structured_response, ONE_CALL, id="create_agent"
    ),
]


@pytest.mark.parametrize(("build", "input_fn", "forecast_of", "chat_kwargs"), WAYS)
@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_structured_output_parses_into_the_model(
    run_episode: Any,
    build: Any,
    input_fn: Any,
    forecast_of: Callable[[Any], Any],
    chat_kwargs: dict[str, Any],
    api: Api,
    stream: bool,
) -> None:
    adapter = LangChainAdapter(
        build, api=api, stream=stream, input_fn=input_fn, chat_kwargs=chat_kwargs
    )
    episode = await run_episode(adapter, ROW)

    forecast = forecast_of(episode.result)
    assert isinstance(forecast, Forecast)
    (interaction,) = episode.interactions
    assert interaction["constrained"] is True
