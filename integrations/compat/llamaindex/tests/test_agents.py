"""LlamaIndex's own agents, pointed at rltap by `OpenAILike`'s api_base and api_key only.

Each test runs one episode as LlamaIndex's documentation writes it (a `FunctionAgent` with a
tool, structured output with the agent's `output_cls` and with `llm.structured_predict`, an
`AgentWorkflow` of two agents that hand off, streaming with `handler.stream_events()`) through a
proxy whose scripted engine plays the model, and asserts that the episode's calls form one tree
with the expected link kinds and that the reward set on its last call reaches every call.

The agent's `output_cls` is filled by one more call after the agent answered: LlamaIndex
re-renders the whole conversation as text inside one new user message (`<current_conversation>`),
which carries the answer (`carry`) without continuing its tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.agent.workflow import (
    AgentOutput,
    AgentStream,
    AgentWorkflow,
    FunctionAgent,
)
from llama_index.core.prompts import PromptTemplate
from llama_index.llms.openai_like import OpenAILike

from rltap.testing.harness import ProxyFactory
from rltap.testing.scripts import content_text, tool_call_text, tool_names
from rltap.testing.structured import Forecast
from rltap.testing.trees import assert_one_tree, assert_reward_reaches_every_call, run_session
from rltap_dev.matrix import MULTI_AGENT, STRUCTURED, TOOL_LOOP, Cell, recorded_cell

Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]] | None

FORECAST = Forecast(sky="sunny", temperature=21, windy=False)
ANSWER = "Paris will be sunny tomorrow, around 21 degrees, with no wind at all."


def openai_like(base_url: str, api_key: str, **options: Any) -> OpenAILike:
    """LlamaIndex's client for OpenAI-compatible servers, pointed at rltap."""
    return OpenAILike(
        model="tiny",
        api_base=base_url,
        api_key=api_key,
        is_chat_model=True,
        is_function_calling_model=True,
        **options,
    )


async def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"The weather in {city} is 21 degrees and sunny."


def weather_script(messages: Messages, tools: Tools, turn: int) -> str:
    """Calls get_weather for Paris, answers from its result; asked for a `Forecast` (a tool of
    that name, or a response format without tools), fills it in."""
    if "Forecast" in tool_names(tools):
        return tool_call_text("Forecast", FORECAST.model_dump())
    if not tools:
        return FORECAST.model_dump_json()
    if messages[-1].get("role") == "tool":
        return ANSWER
    return tool_call_text("get_weather", {"city": "Paris"})


def weather_agent(llm: OpenAILike, **options: Any) -> FunctionAgent:
    return FunctionAgent(
        tools=[get_weather],
        llm=llm,
        system_prompt="You are a helpful assistant that answers weather questions.",
        **options,
    )


async def test_function_agent_with_a_tool_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    answers: list[str] = []

    async def agent(base_url: str, api_key: str) -> None:
        assistant = weather_agent(openai_like(base_url, api_key), streaming=False)
        answers.append(str(await assistant.run(user_msg="What is the weather in Paris?")))

    with recorded_cell(Cell("llamaindex", "inline", False, "chat", TOOL_LOOP)):
        items = await run_session(proxy, agent)
        assert answers == [ANSWER]
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


async def test_streamed_function_agent_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    deltas: list[str] = []
    answers: list[str] = []

    async def agent(base_url: str, api_key: str) -> None:
        assistant = weather_agent(openai_like(base_url, api_key), streaming=True)
        handler = assistant.run(user_msg="What is the weather in Paris?")
        events = [event async for event in handler.stream_events()]
        deltas.extend(event.delta for event in events if isinstance(event, AgentStream))
        answers.append(str(await handler))

    with recorded_cell(Cell("llamaindex", "inline", True, "chat", TOOL_LOOP)):
        items = await run_session(proxy, agent)
        assert answers == [ANSWER]
        assert len([delta for delta in deltas if delta]) > 1, deltas
        assert "".join(deltas).endswith(ANSWER)
        assert_one_tree(items, ["root", "prefix"])
        assert_reward_reaches_every_call(items)


async def test_agent_output_cls_carries_the_answer(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    structured: list[Any] = []

    async def agent(base_url: str, api_key: str) -> None:
        assistant = weather_agent(
            openai_like(base_url, api_key), streaming=False, output_cls=Forecast
        )
        result = await assistant.run(user_msg="What is the weather tomorrow in Paris?")
        structured.append(result.get_pydantic_model(Forecast))

    with recorded_cell(Cell("llamaindex", "inline", False, "chat", STRUCTURED)):
        items = await run_session(proxy, agent)
        assert structured == [FORECAST]
        # The third call asks for the Forecast with the conversation re-rendered as text in one
        # user message, the agent's answer in it.
        formatting = items[-1]
        (prompt,) = [m for m in formatting["messages"] if m["role"] == "user"]
        assert content_text(prompt).startswith("<current_conversation>")
        assert f"<message>{ANSWER}</message>" in content_text(prompt)
        assert formatting["constrained"]
        assert_one_tree(items, ["root", "prefix", "carry"])
        assert_reward_reaches_every_call(items)
        assert formatting["parent_id"] == items[1]["interaction_id"]


async def test_structured_predict_is_one_constrained_call(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(weather_script)
    forecasts: list[Forecast] = []

    async def predict(base_url: str, api_key: str) -> None:
        llm = openai_like(base_url, api_key, should_use_structured_outputs=True)
        prompt = PromptTemplate("Give tomorrow's forecast for {city}.")
        forecasts.append(await llm.astructured_predict(Forecast, prompt, city="Paris"))

    with recorded_cell(Cell("llamaindex", "inline", False, "chat", STRUCTURED)):
        items = await run_session(proxy, predict)
        assert forecasts == [FORECAST]
        assert [item["constrained"] for item in items] == [True]
        assert_one_tree(items, ["root"])
        assert_reward_reaches_every_call(items)


def research_script(messages: Messages, tools: Tools, turn: int) -> str:
    """The research agent finds a fact and hands over to the write agent, which writes."""
    system = content_text(messages[0])
    last = messages[-1]
    if "ResearchAgent" in system:
        if last.get("role") == "tool":
            return tool_call_text("handoff", {"to_agent": "WriteAgent", "reason": "Time to write."})
        return tool_call_text("search_web", {"query": "history of the internet"})
    return "The internet began as ARPANET in 1969 and grew into the web we use today."


async def search_web(query: str) -> str:
    """Search the web for a topic."""
    return f"Notes on {query}: ARPANET, 1969."


async def test_agent_workflow_handoff_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(research_script)
    speakers: list[str] = []

    async def workflow(base_url: str, api_key: str) -> None:
        llm = openai_like(base_url, api_key)
        research_agent = FunctionAgent(
            name="ResearchAgent",
            description="Searches the web for information on a topic.",
            system_prompt="You are the ResearchAgent. Search, then hand off to the WriteAgent.",
            llm=llm,
            tools=[search_web],
            can_handoff_to=["WriteAgent"],
            streaming=False,
        )
        write_agent = FunctionAgent(
            name="WriteAgent",
            description="Writes a short report from the research notes.",
            system_prompt="You are the WriteAgent. Write a short report from the notes.",
            llm=llm,
            can_handoff_to=["ResearchAgent"],
            streaming=False,
        )
        agents = AgentWorkflow(agents=[research_agent, write_agent], root_agent="ResearchAgent")
        handler = agents.run(user_msg="Write a short report on the history of the internet.")
        events = [event async for event in handler.stream_events()]
        speakers.extend(e.current_agent_name for e in events if isinstance(e, AgentOutput))
        await handler

    with recorded_cell(Cell("llamaindex", "inline", False, "chat", MULTI_AGENT)):
        items = await run_session(proxy, workflow)
        assert speakers == ["ResearchAgent", "ResearchAgent", "WriteAgent"]
        assert_one_tree(items, ["root", "prefix", "handoff"])
        assert_reward_reaches_every_call(items)
        # The write agent's call holds the research agent's `handoff` tool call and its result
        # under its own system prompt: the conversation changed hands.
        _, handed, written = items
        assert written["parent_id"] == handed["interaction_id"]
        assert handed["output_message_list"][0]["tool_calls"][0]["function"]["name"] == "handoff"
