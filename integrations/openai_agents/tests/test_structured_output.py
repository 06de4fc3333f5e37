"""The Agents SDK's structured output (`Agent(output_type=...)`, run by `Runner.run` and
`Runner.run_streamed`) against a real proxy whose embedded engine samples the tiny model under the
schema's grammar: the run's `final_output` is the pydantic model, on Chat Completions and
Responses, and the recorded reply is that object's compact JSON, marked constrained. The adapter's
own agent mode runs it in the matrix's structured-output cells."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from oa_agents_for_tests import forecast_run, forecast_run_streamed

from rltap.adapter import Api
from rltap.testing import RunningProxy
from rltap.testing.harness import embedded_proxy
from rltap.testing.structured import Forecast, recorded_forecast
from rltap_openai_agents import OpenAIAgentsAdapter


@pytest.fixture
async def proxy() -> AsyncIterator[RunningProxy]:
    async with embedded_proxy() as running:
        yield running


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_output_type_parses_into_the_model(
    proxy: RunningProxy, api: Api, stream: bool
) -> None:
    episode = forecast_run_streamed if stream else forecast_run
    adapter = OpenAIAgentsAdapter(episode=episode, api=api)

    forecast, interaction = await recorded_forecast(proxy, adapter)

    assert isinstance(forecast, Forecast)
    assert interaction["constrained"] is True
    assert interaction["output_text"] == forecast.model_dump_json()
