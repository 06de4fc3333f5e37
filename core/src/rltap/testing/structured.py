"""Structured outputs as agents ask for them: the schema the tests and the matrix's structured
cells use, and agents written with the plain `openai` and `anthropic` SDKs' `parse` helpers.

`Forecast` has no free-text field: an enum, an integer and a boolean. Under its grammar even the
tiny random model ends a reply within a few tokens (a free string would run to `max_tokens`,
since almost every token may continue one), so its replies parse, and a reply that does not
parse is a proxy bug. No bounds on the integer either: the anthropic SDK moves `minimum` and
`maximum` into the description before sending, and would then reject what the model wrote.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rltap.adapter import AgentAdapter, Connection
from rltap.testing.proxy import RunningProxy
from rltap.testing.sdk_agents import anthropic_client

__all__ = [
    "FORECAST_QUESTION",
    "AnthropicSDKParseAgent",
    "Forecast",
    "OpenAISDKParseAgent",
    "forecast_reward",
    "recorded_forecast",
]

FORECAST_QUESTION = "What is the weather tomorrow? Answer with a forecast."


class Forecast(BaseModel):
    """Tomorrow's weather."""

    model_config = ConfigDict(extra="forbid")

    sky: Literal["sunny", "cloudy", "rainy"]
    temperature: int
    windy: bool


def forecast_reward(result: Any, data: Any) -> float:
    """1.0 when the framework parsed the reply into a `Forecast`."""
    return 1.0 if isinstance(result, Forecast) else 0.0


async def recorded_forecast(proxy: RunningProxy, agent: AgentAdapter) -> tuple[Any, dict[str, Any]]:
    """Run `agent` (without a reward_fn: it returns what its framework parsed) on
    `FORECAST_QUESTION` in a fresh session of `proxy`; return its result and the session's one
    recorded interaction, as the export gives it."""
    session_id, key = await proxy.start_session()
    result = await agent.run(
        {"question": FORECAST_QUESTION},
        base_url=proxy.base_url,
        api_key=key,
        http_client=proxy.http,
    )
    ended = await proxy.session_post(key, "/rl/end_session")
    assert ended.status_code == 200, ended.text
    (interaction,) = (await proxy.export(session_id))["interactions"]
    return result, interaction


class OpenAISDKParseAgent(AgentAdapter):
    """`chat.completions.parse` / `responses.parse` (or their streams) with `Forecast`;
    returns the parsed `Forecast` (None when the SDK parsed nothing)."""

    requirement = "openai>=1.100"

    def __init__(self, *, wire_format: str = "chat", stream: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.wire_format = wire_format
        self.stream = stream

    async def _run(self, data: Any, connection: Connection, **kwargs: Any) -> Any:
        import openai

        client = openai.AsyncOpenAI(
            base_url=connection.base_url,
            api_key=connection.api_key,
            http_client=connection.http_client,
            max_retries=0,
        )
        messages: list[Any] = [{"role": "user", "content": data["question"]}]
        if self.wire_format == "responses":
            if self.stream:
                async with client.responses.stream(
                    model=self.model, input=messages, text_format=Forecast
                ) as events:
                    return (await events.get_final_response()).output_parsed
            parsed = await client.responses.parse(
                model=self.model, input=messages, text_format=Forecast
            )
            return parsed.output_parsed
        if self.stream:
            async with client.chat.completions.stream(
                model=self.model, messages=messages, response_format=Forecast
            ) as chunks:
                return (await chunks.get_final_completion()).choices[0].message.parsed
        completion = await client.chat.completions.parse(
            model=self.model, messages=messages, response_format=Forecast
        )
        return completion.choices[0].message.parsed


class AnthropicSDKParseAgent(AgentAdapter):
    """`messages.parse` (or `messages.stream`) with `output_format=Forecast`; returns the
    parsed `Forecast`."""

    requirement = "anthropic>=2.0"

    def __init__(self, *, stream: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = stream

    async def _run(self, data: Any, connection: Connection, **kwargs: Any) -> Any:
        client = anthropic_client(connection)
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": 256,
            "messages": [{"role": "user", "content": data["question"]}],
            "output_format": Forecast,
        }
        if self.stream:
            async with client.messages.stream(**request) as events:
                return (await events.get_final_message()).parsed_output
        return (await client.messages.parse(**request)).parsed_output
