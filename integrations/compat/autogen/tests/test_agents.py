"""AutoGen AgentChat's own agents and teams, pointed at rltap by base URL and key only.

Each test runs one episode as AutoGen's documentation writes it (an `AssistantAgent` with a tool,
structured output, a `RoundRobinGroupChat`, a `SelectorGroupChat`, a `Swarm`, streaming) through a
proxy whose scripted engine plays the model, and asserts that the episode's calls form one tree
with the expected link kinds and that the reward set on its last call reaches every call.

AutoGen relays one agent's reply to the other agents of a team as a `user` message named after
the speaker: that call carries the earlier reply (`carry`). Its reflection call after a tool is
sent without tools (`tool_choice="none"`): the same agent with its tools changed (`rewrite`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.conditions import TextMentionTermination
from autogen_agentchat.messages import (
    BaseAgentEvent,
    BaseChatMessage,
    HandoffMessage,
    ModelClientStreamingChunkEvent,
    StructuredMessage,
)
from autogen_agentchat.teams import RoundRobinGroupChat, SelectorGroupChat, Swarm
from autogen_core.models import ModelFamily, ModelInfo
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient

from rltap.testing.harness import ProxyFactory
from rltap.testing.scripts import FINAL_PREFIX, content_text, tool_call_text, tool_then_answer
from rltap.testing.structured import Forecast
from rltap.testing.trees import assert_one_tree, assert_reward_reaches_every_call, run_session
from rltap_dev.matrix import MULTI_AGENT, STRUCTURED, TOOL_LOOP, Cell, recorded_cell

Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]] | None

MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=True,
    structured_output=True,
    family=ModelFamily.UNKNOWN,
)
FORECAST = Forecast(sky="sunny", temperature=21, windy=False)


def model_client(base_url: str, api_key: str) -> OpenAIChatCompletionClient:
    """AutoGen's OpenAI client pointed at rltap: the documented base_url, api_key and a
    `model_info` for a model name it does not know."""
    return OpenAIChatCompletionClient(
        model="tiny", base_url=base_url, api_key=api_key, model_info=MODEL_INFO
    )


def system_prompt(messages: Messages) -> str:
    return content_text(messages[0]) if messages and messages[0].get("role") == "system" else ""


async def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"The weather in {city} is 73 degrees and sunny."


# Calls get_weather for Paris, then answers with the tool's result.
weather_script = tool_then_answer(
    "get_weather", {"city": "Paris"}, lambda result: f"{FINAL_PREFIX} {result}"
)


def weather_agent(
    client: OpenAIChatCompletionClient, *, strict: bool = False, **options: Any
) -> AssistantAgent:
    return AssistantAgent(
        name="weather_agent",
        model_client=client,
        # Structured output mode needs strict tools (AutoGen's docs: `FunctionTool(strict=True)`).
        tools=[FunctionTool(get_weather, description="Get the weather for a city.", strict=strict)],
        system_message="You are a helpful assistant.",
        **options,
    )


async def test_assistant_agent_with_a_tool_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    results: list[TaskResult] = []

    async def agent(base_url: str, api_key: str) -> None:
        client = model_client(base_url, api_key)
        # The reflection after the tool is asked without tools: a rewrite of the first call.
        assistant = weather_agent(client, reflect_on_tool_use=True)
        results.append(await assistant.run(task="What is the weather in Paris?"))
        await client.close()

    with recorded_cell(Cell("autogen", "inline", False, "chat", TOOL_LOOP)):
        items = await run_session(proxy, agent)
        (result,) = results
        assert result.messages[-1].to_text() == f"{FINAL_PREFIX} {await get_weather('Paris')}"
        assert_one_tree(items, ["root", "rewrite"])
        assert_reward_reaches_every_call(items)


async def test_streamed_tool_loop_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    chunks: list[str] = []
    results: list[TaskResult] = []

    async def agent(base_url: str, api_key: str) -> None:
        client = model_client(base_url, api_key)
        # Tools stay offered while the agent loops: the answer continues the first call.
        assistant = weather_agent(client, model_client_stream=True, max_tool_iterations=3)
        async for event in assistant.run_stream(task="What is the weather in Paris?"):
            if isinstance(event, ModelClientStreamingChunkEvent):
                chunks.append(event.content)
            elif isinstance(event, TaskResult):
                results.append(event)
        await client.close()

    with recorded_cell(Cell("autogen", "inline", True, "chat", TOOL_LOOP)):
        items = await run_session(proxy, agent)
        (result,) = results
        answer = f"{FINAL_PREFIX} {await get_weather('Paris')}"
        assert result.messages[-1].to_text() == answer
        assert len(chunks) > 1, chunks
        assert "".join(chunks) == answer
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


# Looks the weather up, then writes the forecast as compact JSON (what the grammar of the
# response format admits).
forecast_script = tool_then_answer("get_weather", {"city": "Paris"}, FORECAST.model_dump_json())


async def test_structured_output_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(forecast_script)
    results: list[TaskResult] = []

    async def agent(base_url: str, api_key: str) -> None:
        client = model_client(base_url, api_key)
        assistant = weather_agent(client, strict=True, output_content_type=Forecast)
        results.append(await assistant.run(task="What is the weather tomorrow in Paris?"))
        await client.close()

    with recorded_cell(Cell("autogen", "inline", False, "chat", STRUCTURED)):
        items = await run_session(proxy, agent)
        (result,) = results
        final = result.messages[-1]
        assert isinstance(final, StructuredMessage)
        assert final.content == FORECAST
        # Both calls were sampled under the Forecast schema's grammar (the first one's grammar
        # also admits a tool call).
        assert [item["constrained"] for item in items] == [True, True]
        assert_one_tree(items, ["root", "rewrite"])
        assert_reward_reaches_every_call(items)


POEMS = ("Leaves fall,\nthe year exhales.", "Leaves fall and drift,\nthe year exhales its gift.")
FEEDBACK = "Make it rhyme."


def poem_script(messages: Messages, tools: Tools, turn: int) -> str:
    """The primary agent writes a poem, then a rhyming one; the critic asks for a rhyme, then
    approves. `turn` counts the agent's own replies in its history."""
    if "feedback" in system_prompt(messages):
        return FEEDBACK if turn == 0 else "APPROVE"
    return POEMS[min(turn, 1)]


def relayed_reply(call: Mapping[str, Any], speaker: str) -> Mapping[str, Any]:
    """The latest message of `call` that relays `speaker`'s reply to another agent."""
    return [m for m in call["messages"] if m.get("name") == speaker][-1]


async def test_round_robin_group_chat_is_one_chain_of_carries(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(poem_script)
    results: list[TaskResult] = []

    async def team(base_url: str, api_key: str) -> None:
        client = model_client(base_url, api_key)
        primary = AssistantAgent(
            "primary", model_client=client, system_message="You are a helpful AI assistant."
        )
        critic = AssistantAgent(
            "critic",
            model_client=client,
            system_message="Provide constructive feedback. Respond with 'APPROVE' when your "
            "feedbacks are addressed.",
        )
        chat = RoundRobinGroupChat(
            [primary, critic], termination_condition=TextMentionTermination("APPROVE")
        )
        results.append(await chat.run(task="Write a short poem about the fall season."))
        await client.close()

    with recorded_cell(Cell("autogen", "inline", False, "chat", MULTI_AGENT)):
        items = await run_session(proxy, team)
        (result,) = results
        assert [m.source for m in result.messages] == [
            "user", "primary", "critic", "primary", "critic"
        ]  # fmt: skip
        # Each agent gets the other's latest reply as a user message named after it; each call
        # continues the reply it was just given, so the chat's four calls are one chain.
        assert_one_tree(items, ["root", "carry", "carry", "carry"])
        assert_reward_reaches_every_call(items)
        speakers = ["primary", "critic", "primary"]
        for (before, after), speaker in zip(itertools.pairwise(items), speakers, strict=True):
            relayed = relayed_reply(after, speaker)
            assert (relayed["role"], relayed["content"]) == ("user", before["output_text"])
            assert after["parent_id"] == before["interaction_id"]


def check_calculation(x: int, y: int, answer: int) -> str:
    """Check the sum of two numbers."""
    return "Correct!" if x + y == answer else "Incorrect!"


def calculation_script(messages: Messages, tools: Tools, turn: int) -> str:
    """Agent1 adds; Agent2 checks Agent1's answer with its tool."""
    if tools:
        return tool_call_text("check_calculation", {"x": 1, "y": 1, "answer": 2})
    return "1 + 1 = 2"


def selector_func(messages: Sequence[BaseAgentEvent | BaseChatMessage]) -> str | None:
    """AutoGen's documented custom selector: Agent1 calculates, Agent2 checks."""
    if len(messages) == 1 or messages[-1].to_text() == "Incorrect!":
        return "Agent1"
    if messages[-1].source == "Agent1":
        return "Agent2"
    return None


async def test_selector_group_chat_relays_a_reply_as_carry(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(calculation_script)
    results: list[TaskResult] = []

    async def team(base_url: str, api_key: str) -> None:
        client = model_client(base_url, api_key)
        agent1 = AssistantAgent(
            "Agent1",
            client,
            description="For calculation",
            system_message="Calculate the sum of two numbers",
        )
        agent2 = AssistantAgent(
            "Agent2",
            client,
            tools=[check_calculation],
            description="For checking calculation",
            system_message="Check the answer and respond with 'Correct!' or 'Incorrect!'",
        )
        chat = SelectorGroupChat(
            [agent1, agent2],
            model_client=client,
            termination_condition=TextMentionTermination("Correct!"),
            selector_func=selector_func,
        )
        results.append(await chat.run(task="What is 1 + 1?"))
        await client.close()

    with recorded_cell(Cell("autogen", "inline", False, "chat", MULTI_AGENT)):
        items = await run_session(proxy, team)
        (result,) = results
        assert result.messages[-1].to_text() == "Correct!"
        calculated, checked = items
        relayed = relayed_reply(checked, "Agent1")
        assert (relayed["role"], relayed["content"]) == ("user", calculated["output_text"])
        assert_one_tree(items, ["root", "carry"])
        assert_reward_reaches_every_call(items)


async def refund_flight(flight_id: str) -> str:
    """Refund a flight."""
    return f"Flight {flight_id} refunded."


def refund_script(messages: Messages, tools: Tools, turn: int) -> str:
    """The travel agent hands the refund over; the refunder refunds, then ends the chat."""
    if "travel agent" in system_prompt(messages):
        return tool_call_text("transfer_to_flights_refunder", {})
    if messages[-1].get("role") == "tool":
        return f"{content_text(messages[-1])} TERMINATE"
    return tool_call_text("refund_flight", {"flight_id": "AB123"})


async def test_swarm_handoff_links_the_other_agent_as_handoff(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(refund_script)
    results: list[TaskResult] = []

    async def team(base_url: str, api_key: str) -> None:
        client = model_client(base_url, api_key)
        travel_agent = AssistantAgent(
            "travel_agent",
            model_client=client,
            handoffs=["flights_refunder"],
            system_message="You are a travel agent. Hand refunds to flights_refunder.",
        )
        flights_refunder = AssistantAgent(
            "flights_refunder",
            model_client=client,
            tools=[refund_flight],
            system_message="You refund flights. Say TERMINATE when done.",
        )
        done = TextMentionTermination("TERMINATE")
        swarm = Swarm([travel_agent, flights_refunder], termination_condition=done)
        results.append(await swarm.run(task="Refund my flight AB123."))
        await client.close()

    with recorded_cell(Cell("autogen", "inline", False, "chat", MULTI_AGENT)):
        items = await run_session(proxy, team)
        (result,) = results
        handoffs = [m for m in result.messages if isinstance(m, HandoffMessage)]
        assert [(m.source, m.target) for m in handoffs] == [("travel_agent", "flights_refunder")]
        assert result.messages[-1].to_text() == "Flight AB123 refunded. TERMINATE"
        handed, refunding, answered = items
        assert handed["output_message_list"][0]["tool_calls"][0]["function"]["name"] == (
            "transfer_to_flights_refunder"
        )
        # The refunder's first call follows the transfer tool: the conversation changed hands,
        # it is not the transfer tool's work (subagent).
        assert_one_tree(items, ["root", "handoff", "prefix"])
        assert_reward_reaches_every_call(items)
        assert refunding["parent_id"] == handed["interaction_id"]
        assert answered["parent_id"] == refunding["interaction_id"]
