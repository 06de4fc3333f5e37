"""Agno's documented agents through the rltap proxy: each episode's calls are linked as one tree
and the reward set on the last call reaches all of them.

The agents are the documentation's forms: an `Agent` with a Python function as its tool, the
same agent with `output_schema` (structured outputs work with tools), a `Team` whose leader runs
its members through its `delegate_task_to_member` tool (coordinate mode, the default), and
`stream=True` runs of the agent and of the team. The scripted engine plays the model: it reads
the conversation and the offered tools and writes the reply, tool calls in hermes format, which
the proxy parses into native tool calls; a structured reply is compact JSON, as the schema's
grammar admits it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agno.agent import Agent
from agno.models.openai.like import OpenAILike
from agno.run.agent import RunContentEvent
from agno.run.team import RunContentEvent as TeamRunContentEvent
from agno.team import Team
from pydantic import BaseModel, Field

from rltap.testing.harness import ProxyFactory
from rltap.testing.scripts import tool_call_text, tool_names
from rltap.testing.trees import assert_one_tree, assert_reward_reaches_every_call, run_session
from rltap_dev.matrix import MULTI_AGENT, STRUCTURED, TOOL_LOOP, Cell, recorded_cell

FRAMEWORK = "agno"
Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]] | None

WEATHER_PROMPT = "You answer questions about the weather. Use get_weather."
LEADER_PROMPT = "Delegate weather questions to the Weather Agent, then answer the user."
QUESTION = "What is the weather in Paris?"


def proxy_model(base_url: str, api_key: str) -> OpenAILike:
    """The documented way to reach an OpenAI-compatible server: `OpenAILike`'s URL and key."""
    return OpenAILike(id="tiny", base_url=base_url, api_key=api_key)


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"{city}: 18 C, light rain"


def weather_agent(model: OpenAILike, **options: Any) -> Agent:
    return Agent(
        name="Weather Agent",
        role="Gets the current weather of a city",
        model=model,
        tools=[get_weather],
        instructions=WEATHER_PROMPT,
        **options,
    )


def weather_team(base_url: str, api_key: str) -> Team:
    return Team(
        name="Travel Team",
        members=[weather_agent(proxy_model(base_url, api_key))],
        model=proxy_model(base_url, api_key),
        instructions=LEADER_PROMPT,
    )


class WeatherReport(BaseModel):
    city: str = Field(description="The city asked about")
    conditions: str
    temperature_c: int


def answer(weather: str) -> str:
    return f"In {weather.replace(': ', ' it is ')}.\n\nTake an umbrella."


def weather_script(messages: Messages, tools: Tools, turn: int) -> str:
    """The leader delegates and then relays the member's answer; the weather agent looks the
    weather up, then answers from the tool's result."""
    last = messages[-1]
    if "delegate_task_to_member" in tool_names(tools):
        if last["role"] == "tool":
            return f"The Weather Agent says: {last['content']}"
        return tool_call_text("delegate_task_to_member", member_id="weather-agent", task=QUESTION)
    if last["role"] != "tool":
        return tool_call_text("get_weather", city="Paris")
    return answer(str(last["content"]))


def weather_report_script(messages: Messages, tools: Tools, turn: int) -> str:
    """Looks the weather up, then answers with a `WeatherReport` read off the tool's result."""
    last = messages[-1]
    if last["role"] != "tool":
        return tool_call_text("get_weather", city="Paris")
    city, rest = str(last["content"]).split(": ")
    temperature, conditions = rest.split(", ")
    report = {"city": city, "conditions": conditions, "temperature_c": int(temperature[:-2])}
    return json.dumps(report, separators=(",", ":"))


def is_text(event: Any, kind: type) -> bool:
    """Whether `event` is a text delta of the kind (the agent's, or the team leader's)."""
    return isinstance(event, kind) and isinstance(event.content, str)


def parent_of(items: Sequence[Mapping[str, Any]], index: int) -> Any:
    return items[index].get("parent_id")


def ids(items: Sequence[Mapping[str, Any]]) -> list[str]:
    return [item["interaction_id"] for item in items]


async def test_tool_agent_is_one_chain(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    outputs: list[Any] = []

    async def ask(base_url: str, api_key: str) -> None:
        response = await weather_agent(proxy_model(base_url, api_key)).arun(QUESTION)
        outputs.append(response.content)

    with recorded_cell(Cell(FRAMEWORK, "inline", False, "chat", TOOL_LOOP)):
        items = await run_session(proxy, ask)
        assert outputs == [answer(get_weather("Paris"))]
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


async def test_streamed_tool_agent_is_one_chain(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    deltas: list[str] = []

    async def ask(base_url: str, api_key: str) -> None:
        agent = weather_agent(proxy_model(base_url, api_key))
        events = agent.arun(QUESTION, stream=True)
        deltas.extend([event.content async for event in events if is_text(event, RunContentEvent)])

    with recorded_cell(Cell(FRAMEWORK, "inline", True, "chat", TOOL_LOOP)):
        items = await run_session(proxy, ask)
        assert "".join(deltas) == answer(get_weather("Paris"))  # whitespace kept
        assert len(deltas) > 1  # streamed token by token
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


async def test_structured_output_after_a_tool_is_one_chain(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_report_script)
    outputs: list[Any] = []

    async def ask(base_url: str, api_key: str) -> None:
        agent = weather_agent(proxy_model(base_url, api_key), output_schema=WeatherReport)
        response = await agent.arun(QUESTION)
        outputs.append(response.content)

    with recorded_cell(Cell(FRAMEWORK, "inline", False, "chat", STRUCTURED)):
        items = await run_session(proxy, ask)
        assert outputs == [WeatherReport(city="Paris", conditions="light rain", temperature_c=18)]
        assert [item["constrained"] for item in items] == [True, True]
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


async def test_team_member_is_a_subagent_of_the_delegation(make_proxy: ProxyFactory) -> None:
    """Leader call 1 delegates; the member's two calls (its tool loop) run under that open
    tool call; leader call 2 continues call 1 with the member's answer."""
    proxy = await make_proxy(weather_script)
    outputs: list[Any] = []

    async def ask(base_url: str, api_key: str) -> None:
        response = await weather_team(base_url, api_key).arun(QUESTION)
        outputs.append(response.content)

    with recorded_cell(Cell(FRAMEWORK, "inline", False, "chat", MULTI_AGENT)):
        items = await run_session(proxy, ask)
        assert outputs == [f"The Weather Agent says: {answer(get_weather('Paris'))}"]
        assert_team_tree(items)


async def test_streamed_team_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    deltas: list[str] = []

    async def ask(base_url: str, api_key: str) -> None:
        events = weather_team(base_url, api_key).arun(QUESTION, stream=True)
        leader = [event.content async for event in events if is_text(event, TeamRunContentEvent)]
        deltas.extend(leader)

    with recorded_cell(Cell(FRAMEWORK, "inline", True, "chat", MULTI_AGENT)):
        items = await run_session(proxy, ask)
        assert "".join(deltas) == f"The Weather Agent says: {answer(get_weather('Paris'))}"
        assert len(deltas) > 1
        assert_team_tree(items)


def assert_team_tree(items: Sequence[Mapping[str, Any]]) -> None:
    """Calls in order: leader 1 (delegates), member 1 (get_weather), member 2 (answers),
    leader 2 (answers the user)."""
    assert_one_tree(items, ["root", "subagent", "prefix", "prefix"])
    assert [item["link"] for item in items] == ["root", "subagent", "prefix", "prefix"]
    leader, member = ids(items)[:2]
    assert [parent_of(items, index) for index in (1, 2, 3)] == [leader, member, leader]
    assert_reward_reaches_every_call(items)
