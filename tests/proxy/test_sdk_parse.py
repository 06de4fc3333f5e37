"""The SDKs' own structured-output helpers against a real proxy whose embedded engine samples the
tiny model under the schema's grammar: openai `chat.completions.parse` and `responses.parse`,
anthropic `messages.parse` (and their streams) give the pydantic model, and the recorded reply is
its compact JSON, marked constrained."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from rltap.testing.harness import embedded_proxy
from rltap.testing.proxy import RunningProxy
from rltap.testing.structured import (
    AnthropicSDKParseAgent,
    Forecast,
    OpenAISDKParseAgent,
    recorded_forecast,
)


@pytest.fixture
async def proxy() -> AsyncIterator[RunningProxy]:
    async with embedded_proxy() as running:
        yield running


AGENTS = [
    pytest.param(lambda stream: OpenAISDKParseAgent(stream=stream), id="chat"),
    pytest.param(
        lambda stream: OpenAISDKParseAgent(wire_format="responses", stream=stream), id="responses"
    ),
    pytest.param(lambda stream: AnthropicSDKParseAgent(stream=stream), id="messages"),
]


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
@pytest.mark.parametrize("make_agent", AGENTS)
async def test_parse_gives_the_model(proxy: RunningProxy, make_agent: Any, stream: bool) -> None:
    forecast, interaction = await recorded_forecast(proxy, make_agent(stream))

    assert isinstance(forecast, Forecast)
    assert interaction["constrained"] is True
    assert interaction["output_text"] == forecast.model_dump_json()
