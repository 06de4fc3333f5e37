"""Haystack's `Agent`, pointed at rltap by `OpenAIChatGenerator`'s api_base_url and api_key only.

Each test runs one episode as Haystack's documentation writes it (an `Agent` with a tool,
structured output through `response_format` in `generation_kwargs`, an `Agent` wrapped as an
`AgentTool` of another `Agent`, streaming with `streaming_callback`) through a proxy whose
scripted engine plays the model, and asserts that the episode's calls form one tree with the
expected link kinds and that the reward set on its last call reaches every call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from haystack.components.agents import Agent
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage, StreamingChunk
from haystack.tools import AgentTool, tool
from haystack.utils import Secret

from rltap.testing.harness import ProxyFactory
from rltap.testing.scripts import content_text, tool_call_text, tool_names, tool_then_answer
from rltap.testing.structured import Forecast
from rltap.testing.trees import assert_one_tree, assert_reward_reaches_every_call, run_session
from rltap_dev.matrix import MULTI_AGENT, STRUCTURED, TOOL_LOOP, Cell, recorded_cell

Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]] | None

FORECAST = Forecast(sky="sunny", temperature=21, windy=False)
ANSWER = "Paris will be sunny tomorrow, around 21 degrees, with no wind at all."
QUESTION = "What is the weather in Paris?"


def chat_generator(base_url: str, api_key: str, **options: Any) -> OpenAIChatGenerator:
    """Haystack's OpenAI chat generator pointed at rltap."""
    return OpenAIChatGenerator(
        model="tiny", api_base_url=base_url, api_key=Secret.from_token(api_key), **options
    )


@tool
def get_weather(city: Annotated[str, "the city to get the weather for"]) -> str:
    """Get the weather for a city."""
    return f"The weather in {city} is 21 degrees and sunny."


# Calls get_weather for Paris, then answers from its result.
weather_script = tool_then_answer("get_weather", {"city": "Paris"}, ANSWER)


async def test_agent_with_a_tool_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    replies: list[str | None] = []

    async def agent(base_url: str, api_key: str) -> None:
        assistant = Agent(
            chat_generator=chat_generator(base_url, api_key),
            tools=[get_weather],
            system_prompt="You are a helpful assistant that answers weather questions.",
        )
        result = await assistant.run_async(messages=[ChatMessage.from_user(QUESTION)])
        replies.append(result["last_message"].text)

    with recorded_cell(Cell("haystack", "inline", False, "chat", TOOL_LOOP)):
        items = await run_session(proxy, agent)
        assert replies == [ANSWER]
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


async def test_streamed_agent_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    chunks: list[StreamingChunk] = []
    replies: list[str | None] = []

    async def on_chunk(chunk: StreamingChunk) -> None:
        chunks.append(chunk)

    async def agent(base_url: str, api_key: str) -> None:
        assistant = Agent(
            chat_generator=chat_generator(base_url, api_key),
            tools=[get_weather],
            system_prompt="You are a helpful assistant that answers weather questions.",
            streaming_callback=on_chunk,
        )
        result = await assistant.run_async(messages=[ChatMessage.from_user(QUESTION)])
        replies.append(result["last_message"].text)

    with recorded_cell(Cell("haystack", "inline", True, "chat", TOOL_LOOP)):
        items = await run_session(proxy, agent)
        assert replies == [ANSWER]
        texts = [chunk.content for chunk in chunks if chunk.content]
        assert len(texts) > 1, texts
        assert "".join(texts) == ANSWER
        assert any(chunk.tool_calls for chunk in chunks)  # the first call's tool call streamed
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


# Looks the weather up, then writes the forecast as compact JSON (what the grammar of the
# response format admits).
forecast_script = tool_then_answer("get_weather", {"city": "Paris"}, FORECAST.model_dump_json())


async def test_response_format_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(forecast_script)
    replies: list[str | None] = []

    async def agent(base_url: str, api_key: str) -> None:
        # A Pydantic response format goes through the SDK's `parse`, which takes strict tools.
        generator = chat_generator(
            base_url, api_key, generation_kwargs={"response_format": Forecast}, tools_strict=True
        )
        assistant = Agent(
            chat_generator=generator,
            tools=[get_weather],
            system_prompt="Look the weather up, then answer with a forecast.",
        )
        result = await assistant.run_async(messages=[ChatMessage.from_user(QUESTION)])
        replies.append(result["last_message"].text)

    with recorded_cell(Cell("haystack", "inline", False, "chat", STRUCTURED)):
        items = await run_session(proxy, agent)
        (reply,) = replies
        assert Forecast.model_validate_json(reply or "") == FORECAST
        # Both calls were sampled under the Forecast schema's grammar (the first one's grammar
        # also admits a tool call).
        assert [item["constrained"] for item in items] == [True, True]
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


TASK = "Find out what the weather in Paris is."
FINDINGS = "Findings: Paris is sunny today at 21 degrees, and no wind is expected."


def delegation_script(messages: Messages, tools: Tools, turn: int) -> str:
    """The coordinator delegates to the researcher (an `AgentTool`), which looks the weather up
    and reports; the coordinator then answers from the report."""
    names = tool_names(tools)
    last = messages[-1]
    if "research" in names:
        if last.get("role") == "tool":
            return ANSWER
        return tool_call_text("research", {"messages": [{"role": "user", "content": TASK}]})
    if last.get("role") == "tool":
        return FINDINGS
    return tool_call_text("get_weather", {"city": "Paris"})


async def test_agent_as_a_tool_of_another_agent_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(delegation_script)
    replies: list[str | None] = []

    async def agents(base_url: str, api_key: str) -> None:
        researcher = Agent(
            chat_generator=chat_generator(base_url, api_key),
            tools=[get_weather],
            system_prompt="You are a research specialist. Investigate the task and report.",
        )
        research = AgentTool(
            agent=researcher,
            name="research",
            description="Research a question and report the findings",
        )
        coordinator = Agent(
            chat_generator=chat_generator(base_url, api_key),
            tools=[research],
            system_prompt="You coordinate specialists. Delegate research, then answer the user.",
        )
        result = await coordinator.run_async(messages=[ChatMessage.from_user(QUESTION)])
        replies.append(result["last_message"].text)

    with recorded_cell(Cell("haystack", "inline", False, "chat", MULTI_AGENT)):
        items = await run_session(proxy, agents)
        assert replies == [ANSWER]
        # The coordinator's call (root), the researcher's two calls while the coordinator's
        # `research` call is open (subagent, then prefix), the coordinator's answer (prefix).
        delegated, researching, reported, answered = items
        assert_one_tree(items, ["root", "subagent", "prefix", "prefix"])
        assert_reward_reaches_every_call(items)
        assert researching["parent_id"] == delegated["interaction_id"]
        assert reported["parent_id"] == researching["interaction_id"]
        assert answered["parent_id"] == delegated["interaction_id"]
        assert content_text(answered["messages"][-1]) == FINDINGS
