"""smolagents' agents through rltap: one tree per run, whatever form the history takes.

smolagents does not send its history back as the OpenAI messages it received: every step is
re-rendered from its memory. A ToolCallingAgent's native tool call comes back as assistant text
`Calling tools:\\n[{...}]` and the tool's result as a user message `Observation:\\n...`; a
CodeAgent's reply comes back with `</code>` (the stop string rltap cut) and the same `Calling
tools:` text appended. Each later call therefore carries the earlier reply in another form: a
`carry` link. Each test runs the framework as its documentation shows, against a real proxy
whose scripted engine answers in the model's own tool-call format (hermes) or in smolagents'
`Thought: ... <code>...</code>` format.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from smolagents import (
    ChatMessageStreamDelta,
    CodeAgent,
    FinalAnswerStep,
    LogLevel,
    MultiStepAgent,
    OpenAIServerModel,
    ToolCallingAgent,
    tool,
)

from rltap.testing.harness import ProxyFactory
from rltap.testing.scripts import content_text, tool_call_text, tool_names
from rltap.testing.trees import (
    assert_one_tree,
    assert_reward_reaches_every_call,
    link_kinds,
    run_session,
)
from rltap_dev.matrix import MULTI_AGENT, STRUCTURED, TOOL_LOOP, Cell, recorded_cell

ADD_TASK = "What is 2 + 3? Use the add tool."
MULTIPLY_TASK = "What is 2 * 3? Use the multiply tool."
CAPITAL_TASK = "What is the capital of France? Ask the searcher."


@tool
def add(a: int, b: int) -> int:
    """Adds two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


@tool
def multiply(a: int, b: int) -> int:
    """Multiplies two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a * b


@tool
def lookup_capital(country: str) -> str:
    """Looks up the capital of a country.

    Args:
        country: The country's name.
    """
    return {"France": "Paris"}.get(country, "unknown")


def model(base_url: str, api_key: str) -> OpenAIServerModel:
    """The documented OpenAI-compatible model class, pointed at the proxy."""
    return OpenAIServerModel(model_id="tiny", api_base=base_url, api_key=api_key)


def observation(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The tool result smolagents relays as the last (user) message, or None on a first step."""
    last = messages[-1]
    if last.get("role") == "user" and content_text(last).startswith("Observation:"):
        return content_text(last).removeprefix("Observation:").strip()
    return None


def arithmetic(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """A ToolCallingAgent's two steps: its arithmetic tool on 2 and 3, then `final_answer` with
    the tool's result."""
    result = observation(messages)
    if result is not None:
        return tool_call_text("final_answer", {"answer": result})
    (operation,) = (name for name in tool_names(tools) if name != "final_answer")
    return tool_call_text(operation, {"a": 2, "b": 3})


THOUGHT_ADD = (
    "Thought: I will add the numbers with the tool.\n<code>\ntotal = add(2, 3)\nprint(total)\n"
)
THOUGHT_ANSWER = "Thought: The tool printed the sum.\n<code>\nfinal_answer(total)\n"


def code_steps(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """A CodeAgent's two steps in its documented format, each code block closed by `</code>`
    (the stop string smolagents asks for: rltap cuts it off the reply)."""
    reply = THOUGHT_ANSWER if observation(messages) is not None else THOUGHT_ADD
    return f"{reply}</code>"


def structured_code_steps(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """The same two steps as `ThoughtAndCodeAnswer` JSON (compact, in the schema's order), what a
    CodeAgent with `use_structured_outputs_internally=True` asks for."""
    if observation(messages) is None:
        step = {"thought": "I will add the numbers.", "code": "total = add(2, 3)\nprint(total)"}
    else:
        step = {"thought": "The tool printed the sum.", "code": "final_answer(total)"}
    return json.dumps(step, separators=(",", ":"))


SEARCHER_TASK = "Find the capital of France."
MANAGER_CODE = [
    f'Thought: The searcher can find it.\n<code>\nreport = searcher(task="{SEARCHER_TASK}")\n'
    "print(report)\n</code>",
    'Thought: The searcher found the capital.\n<code>\nfinal_answer("Paris")\n</code>',
]


def manager_and_searcher(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """The manager asks its managed agent `searcher` (by a tool call, or in code when it is a
    CodeAgent), which looks the capital up with its tool; each answers once it has an
    observation. Who is asking shows in the tools offered."""
    result = observation(messages)
    if "lookup_capital" in tool_names(tools):
        if result is None:
            return tool_call_text("lookup_capital", {"country": "France"})
        return tool_call_text("final_answer", {"answer": result})
    if "searcher" in tool_names(tools):
        if result is None:
            return tool_call_text("searcher", {"task": SEARCHER_TASK})
        return tool_call_text("final_answer", {"answer": "Paris"})
    return MANAGER_CODE[result is not None]


def agent_of(kind: str, base_url: str, api_key: str, **options: Any) -> MultiStepAgent:
    if kind == "tool_calling":
        return ToolCallingAgent(
            tools=[add], model=model(base_url, api_key), verbosity_level=LogLevel.OFF, **options
        )
    return CodeAgent(
        tools=[add], model=model(base_url, api_key), verbosity_level=LogLevel.OFF, **options
    )


async def test_tool_calling_agent_is_one_tree_linked_by_carry(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(arithmetic)
    answers = []

    async def run(base_url: str, api_key: str) -> None:
        agent = agent_of("tool_calling", base_url, api_key, max_steps=4)
        answers.append(await asyncio.to_thread(agent.run, ADD_TASK))

    with recorded_cell(Cell("smolagents", "inline", False, "chat", TOOL_LOOP)):
        items = await run_session(proxy, run)
        assert answers == ["5"]
        first, answer = items
        # The native tool call comes back as text, its result as a user message.
        relayed = [(m["role"], content_text(m)) for m in answer["messages"][-2:]]
        assert relayed[0][0] == "assistant"
        assert relayed[0][1].startswith("Calling tools:\n[{")
        assert "'name': 'add'" in relayed[0][1]
        assert relayed[1] == ("user", "Observation:\n5")
        # smolagents sends tool_choice="required": each reply was generated under that grammar.
        assert [item["constrained"] for item in items] == [True, True]
        assert_one_tree(items, ["root", "carry"])
        assert answer["parent_id"] == first["interaction_id"]
        assert_reward_reaches_every_call(items)


async def test_code_agent_is_one_tree_linked_by_carry(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(code_steps)
    answers = []

    async def run(base_url: str, api_key: str) -> None:
        agent = agent_of("code", base_url, api_key, max_steps=4)
        answers.append(await asyncio.to_thread(agent.run, ADD_TASK))

    with recorded_cell(Cell("smolagents", "inline", False, "chat", TOOL_LOOP)):
        items = await run_session(proxy, run)
        assert answers == [5]
        first, answer = items
        # rltap cut the stop string `</code>`; smolagents appends it again, then the call as text.
        assert first["output_text"] == THOUGHT_ADD
        carried = content_text(answer["messages"][-2])
        assert carried.startswith(f"{THOUGHT_ADD}</code>\nCalling tools:\n[{{")
        assert "'name': 'python_interpreter'" in carried
        assert content_text(answer["messages"][-1]).startswith("Observation:\nExecution logs:\n5\n")
        assert_one_tree(items, ["root", "carry"])
        assert answer["parent_id"] == first["interaction_id"]
        assert_reward_reaches_every_call(items)


async def test_code_agent_structured_steps_are_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(structured_code_steps)
    answers = []

    async def run(base_url: str, api_key: str) -> None:
        agent = agent_of(
            "code", base_url, api_key, max_steps=4, use_structured_outputs_internally=True
        )
        answers.append(await asyncio.to_thread(agent.run, ADD_TASK))

    with recorded_cell(Cell("smolagents", "inline", False, "chat", STRUCTURED)):
        items = await run_session(proxy, run)
        assert answers == [5]
        first, answer = items
        # Each step was generated under the ThoughtAndCodeAnswer schema's grammar.
        assert [item["constrained"] for item in items] == [True, True]
        assert json.loads(first["output_text"])["code"] == "total = add(2, 3)\nprint(total)"
        carried = content_text(answer["messages"][-2])
        assert carried.startswith(f"{first['output_text']}\nCalling tools:\n[{{")
        assert_one_tree(items, ["root", "carry"])
        assert_reward_reaches_every_call(items)


async def test_final_answer_left_open_does_not_join_the_next_run(
    make_proxy: ProxyFactory,
) -> None:
    proxy = await make_proxy(arithmetic)
    answers = []

    async def two_runs(base_url: str, api_key: str) -> None:
        # `final_answer` is an output tool: the run ends on its call, which nothing answers.
        adder = ToolCallingAgent(
            tools=[add], model=model(base_url, api_key), verbosity_level=LogLevel.OFF
        )
        answers.append(await asyncio.to_thread(adder.run, ADD_TASK))
        rewarded = await proxy.session_post(api_key, "/rl/set_reward", {"reward": 1.0})
        assert rewarded.status_code == 200, rewarded.text
        # Another agent, another task, in the same session.
        multiplier = ToolCallingAgent(
            tools=[multiply], model=model(base_url, api_key), verbosity_level=LogLevel.OFF
        )
        answers.append(await asyncio.to_thread(multiplier.run, MULTIPLY_TASK))

    with recorded_cell(Cell("smolagents", "inline", False, "chat", TOOL_LOOP)):
        items = await run_session(proxy, two_runs)
        assert answers == ["5", "6"]
        assert len(items) == 4
        roots = [item for item in items if item["parent_id"] is None]
        assert [root["interaction_id"] for root in roots] == [
            items[0]["interaction_id"],
            items[2]["interaction_id"],
        ], f"two runs, two trees: links {link_kinds(items)}"
        assert_one_tree(items[:2], ["root", "carry"])
        assert_one_tree(items[2:], ["root", "carry"])
        assert_reward_reaches_every_call(items)


@pytest.mark.parametrize("manager_kind", ["tool_calling", "code"])
async def test_managed_agent_runs_as_subagent_of_the_managers_call(
    make_proxy: ProxyFactory, manager_kind: str
) -> None:
    proxy = await make_proxy(manager_and_searcher)
    answers = []

    async def run(base_url: str, api_key: str) -> None:
        searcher = ToolCallingAgent(
            tools=[lookup_capital],
            model=model(base_url, api_key),
            name="searcher",
            description="Looks up facts about countries. Give it a task in plain words.",
            verbosity_level=LogLevel.OFF,
        )
        manager_class = ToolCallingAgent if manager_kind == "tool_calling" else CodeAgent
        manager = manager_class(
            tools=[],
            model=model(base_url, api_key),
            managed_agents=[searcher],
            verbosity_level=LogLevel.OFF,
        )
        answers.append(await asyncio.to_thread(manager.run, CAPITAL_TASK))

    with recorded_cell(Cell("smolagents", "inline", False, "chat", MULTI_AGENT)):
        items = await run_session(proxy, run)
        assert answers == ["Paris"]
        manager_call, searcher_call, searcher_answer, manager_answer = items
        # The managed agent is another agent: its own prompt, its task from the manager's call.
        assert searcher_call["agent_id"] == searcher_answer["agent_id"] != manager_call["agent_id"]
        task = content_text(searcher_call["messages"][-1])
        assert "'searcher'" in task
        assert SEARCHER_TASK in task
        # The manager reads the searcher's report as the observation of its own call.
        report = content_text(manager_answer["messages"][-1])
        assert "managed agent 'searcher'" in report
        assert "Paris" in report
        assert_one_tree(items, ["root", "subagent", "carry", "carry"])
        parents = [item["parent_id"] for item in items]
        assert parents == [
            None,
            manager_call["interaction_id"],
            searcher_call["interaction_id"],
            manager_call["interaction_id"],
        ]
        assert_reward_reaches_every_call(items)


@pytest.mark.parametrize(
    ("kind", "script", "answer"),
    [
        pytest.param("tool_calling", arithmetic, "5", id="tool-calling-agent"),
        pytest.param("code", code_steps, 5, id="code-agent"),
    ],
)
async def test_streamed_run_is_one_tree(
    make_proxy: ProxyFactory, kind: str, script: Any, answer: Any
) -> None:
    proxy = await make_proxy(script)
    deltas: list[ChatMessageStreamDelta] = []
    answers = []

    def stream(agent: MultiStepAgent) -> None:
        for event in agent.run(ADD_TASK, stream=True):
            if isinstance(event, ChatMessageStreamDelta):
                deltas.append(event)
            elif isinstance(event, FinalAnswerStep):
                answers.append(event.output)

    async def run(base_url: str, api_key: str) -> None:
        agent = agent_of(kind, base_url, api_key, max_steps=4, stream_outputs=True)
        await asyncio.to_thread(stream, agent)

    with recorded_cell(Cell("smolagents", "inline", True, "chat", TOOL_LOOP)):
        items = await run_session(proxy, run)
        assert answers == [answer]
        if kind == "code":
            # The reply text reached the agent one token at a time, not one block per call.
            assert len([d for d in deltas if d.content]) > 2 * len(items)
            streamed = "".join(d.content or "" for d in deltas)
            assert streamed == "".join(item["output_text"] for item in items)
        else:
            # A tool call streams once its block is complete: its name, then its arguments.
            calls = [call for d in deltas for call in d.tool_calls or []]
            assert [c.function.name for c in calls if c.function.name] == ["add", "final_answer"]
            arguments = [json.loads(c.function.arguments) for c in calls if c.function.arguments]
            assert arguments == [{"a": 2, "b": 3}, {"answer": "5"}]
        assert_one_tree(items, ["root", "carry"])
        assert_reward_reaches_every_call(items)
