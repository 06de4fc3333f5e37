"""The CAMEL episodes the tests run, at module level so subprocess workers can unpickle them.

Each returns what the agent answered; `score` rewards the expected answer of the tool loop:
`add(2, 2)` (the script's sample arguments) then `Final answer: 4`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from camel.agents import ChatAgent
from camel.societies import RolePlaying
from camel.toolkits import FunctionTool

from rltap.testing.structured import Forecast
from rltap_camel import CamelAdapter, ProxyModel

EXPECTED = "Final answer: 4"
TASK_SPECIFIER_SYSTEM = "You can make a task more specific."


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a (int): The first integer.
        b (int): The second integer.

    Returns:
        int: Their sum.
    """
    return a + b


def score(answer: Any, data: Any) -> float:
    return 1.0 if answer == EXPECTED else 0.0


async def ask(data: Any, model: ProxyModel) -> Any:
    """`ChatAgent.astep` without tools: one call."""
    agent = ChatAgent("You are a helpful assistant.", model=model, stream_accumulate=True)
    response = await agent.astep(data["question"])
    if model.stream:
        response = await response
    return response.msgs[0].content


def _calculator(model: ProxyModel) -> ChatAgent:
    # stream_accumulate: a streamed step's final message holds the whole reply, not the last delta
    return ChatAgent(
        "You are a calculator.", model=model, tools=[FunctionTool(add)], stream_accumulate=True
    )


def chat_step(data: Any, model: ProxyModel) -> Any:
    """`ChatAgent.step` (sync) with a tool."""
    response = _calculator(model).step(data["question"])
    return response.msgs[0].content


async def chat_astep(data: Any, model: ProxyModel) -> Any:
    """`ChatAgent.astep` (async) with a tool; a streamed step is awaited for its final reply."""
    response = await _calculator(model).astep(data["question"])
    if model.stream:
        response = await response
    return response.msgs[0].content


async def chat_step_on_the_loop(data: Any, model: ProxyModel) -> Any:
    """A mistake: the sync `step` inside an async episode."""
    return _calculator(model).step(data["question"]).msgs[0].content


def _society(data: Any, model: ProxyModel) -> RolePlaying:
    return RolePlaying(
        assistant_role_name="Math Tutor",
        user_role_name="Student",
        task_prompt=data["task"],
        model=model,
        assistant_agent_kwargs={"tools": [FunctionTool(add)], "stream_accumulate": True},
        user_agent_kwargs={"stream_accumulate": True},
        # The task-specify agent cannot be told to accumulate a stream: give it a plain model.
        task_specify_agent_kwargs={"model": model.with_config(stream=False)},
    )


def role_play(data: Any, model: ProxyModel) -> Any:
    """`RolePlaying` (sync): task-specify agent, then one step of the user and the assistant."""
    society = _society(data, model)
    assistant, _user = society.step(society.init_chat())
    return assistant.msg.content


async def role_play_async(data: Any, model: ProxyModel) -> Any:
    """`RolePlaying.astep`; the constructor runs the task-specify agent synchronously."""
    society = await asyncio.to_thread(_society, data, model)
    assistant, _user = await society.astep(await society.ainit_chat())
    return assistant.msg.content


def forecast_step(data: Any, model: ProxyModel) -> Any:
    """`ChatAgent.step(..., response_format=Forecast)` (sync): the parsed reply."""
    agent = ChatAgent("You forecast the weather.", model=model, stream_accumulate=True)
    return agent.step(data["question"], response_format=Forecast).msgs[0].parsed


async def forecast_astep(data: Any, model: ProxyModel) -> Any:
    """`ChatAgent.astep(..., response_format=Forecast)`; a streamed step is awaited."""
    agent = ChatAgent("You forecast the weather.", model=model, stream_accumulate=True)
    response = await agent.astep(data["question"], response_format=Forecast)
    if model.stream:
        response = await response
    return response.msgs[0].parsed


EPISODES = {
    "chat_step": chat_step,
    "chat_astep": chat_astep,
    "role_play": role_play,
    "role_play_async": role_play_async,
}


class ScenarioAdapter(CamelAdapter):
    """Runs the episode a row names, so one adapter (one subprocess pool) serves them all."""

    def __init__(self, **options: Any) -> None:
        super().__init__(reward_fn=score, **options)

    def episode(self, data: Any, model: ProxyModel) -> Any:
        # An async episode's coroutine is handed back to the adapter, which awaits it on the loop.
        return EPISODES[data["episode"]](data, model)
