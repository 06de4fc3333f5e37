"""CAMEL's structured output (`ChatAgent.step(..., response_format=Model)`) against a real proxy
whose embedded engine samples the tiny model under the schema's grammar: `response.msgs[0].parsed`
is the pydantic model, for `step` and `astep`, streamed or not, and the one recorded call is the
object's compact JSON, marked constrained (CAMEL's fallback to json_object never runs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from camel_episodes import forecast_astep, forecast_step

from rltap.testing import RunningProxy
from rltap.testing.harness import embedded_proxy
from rltap.testing.structured import Forecast, recorded_forecast
from rltap_camel import CamelAdapter


@pytest.fixture
async def proxy() -> AsyncIterator[RunningProxy]:
    """The embedded engine instead of the script: the grammar shapes the reply."""
    async with embedded_proxy() as running:
        yield running


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
@pytest.mark.parametrize(
    "episode", [pytest.param(forecast_step, id="step"), pytest.param(forecast_astep, id="astep")]
)
async def test_response_format_parses_into_the_model(
    proxy: RunningProxy, episode: Any, stream: bool
) -> None:
    forecast, interaction = await recorded_forecast(proxy, CamelAdapter(episode, stream=stream))

    assert isinstance(forecast, Forecast)
    assert interaction["constrained"] is True
    assert Forecast.model_validate_json(interaction["output_text"]) == forecast
