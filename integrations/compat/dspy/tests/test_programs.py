"""DSPy programs through rltap: one tree per program run.

DSPy never continues a chat: every call is a fresh system message (the signature) and one user
message with the inputs. `dspy.ReAct` re-renders its whole trajectory (`[[ ## thought_0 ## ]]`,
`[[ ## tool_name_0 ## ]]`, `[[ ## tool_args_0 ## ]]`, `[[ ## observation_0 ## ]]`, ...) inside
that one user message at every step: each step carries the earlier replies as a transcript, a
`carry` link, and the episode stays one tree. The scripted engine answers in ChatAdapter's
`[[ ## field ## ]]` format, as a model prompted by DSPy does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import dspy
import pytest
from pydantic import BaseModel

from rltap.testing.harness import ProxyFactory
from rltap.testing.scripts import content_text
from rltap.testing.trees import assert_one_tree, assert_reward_reaches_every_call, run_session
from rltap_dev.matrix import STRUCTURED, TOOL_LOOP, Cell, recorded_cell

QUESTION = "What is (2 + 3) + 4? Use the add tool."

Script = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None, int], str]


def lm(base_url: str, api_key: str) -> dspy.LM:
    """The documented OpenAI-compatible LM, pointed at the proxy; no reply cache."""
    return dspy.LM("openai/tiny", api_base=base_url, api_key=api_key, cache=False)


def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


def fields(**values: str) -> str:
    """A reply in ChatAdapter's format: each output field under its header, then `completed`."""
    parts = [f"[[ ## {name} ## ]]\n{value}" for name, value in values.items()]
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


def asks_for(messages: Sequence[Mapping[str, Any]], field: str) -> bool:
    """Whether the signature in the system message has the output field `field`."""
    return f"`{field}`" in content_text(messages[0]).partition("Your output fields are:")[2]


# ReAct's steps: add 2 and 3, add 4 to that, finish; then the extract step answers. The
# thoughts as a model writes them: a sentence of reasons, or a few words.
Step = tuple[str, str, dict[str, int]]
SENTENCE_STEPS: list[Step] = [
    (
        "I need the sum inside the parentheses first, so I call the add tool on 2 and 3.",
        "add",
        {"a": 2, "b": 3},
    ),
    (
        "The inner sum is 5; now I add 4 to it with the same tool to get the total.",
        "add",
        {"a": 5, "b": 4},
    ),
    (
        "The tool says the total is 9, which answers the question, so I can finish now.",
        "finish",
        {},
    ),
]
ANSWER_REASONING = "The add tool gave 5, then 9."
ANSWER = "(2 + 3) + 4 is 9."


def react_script(steps: Sequence[Step]) -> Script:
    """`dspy.ReAct`'s calls: the next of `steps` after as many observations as the trajectory
    holds, then the extract call's reasoning and answer."""

    def react(
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        turn: int,
    ) -> str:
        if not asks_for(messages, "next_tool_name"):
            return fields(reasoning=ANSWER_REASONING, answer=ANSWER)
        thought, tool, arguments = steps[content_text(messages[-1]).count("[[ ## observation_")]
        return fields(
            next_thought=thought, next_tool_name=tool, next_tool_args=json.dumps(arguments)
        )

    return react


def chain_of_thought(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    return fields(reasoning="Two plus three is five.", answer="5")


class Forecast(BaseModel):
    city: str
    sky: Literal["sunny", "cloudy", "rainy"]
    temperature: int


class WeatherForecast(dspy.Signature):
    """Forecast tomorrow's weather in a city."""

    city: str = dspy.InputField()
    forecast: Forecast = dspy.OutputField()


PARIS = Forecast(city="Paris", sky="sunny", temperature=21)


def forecast_reply(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    return fields(forecast=PARIS.model_dump_json())


async def test_chain_of_thought_is_one_call(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(chain_of_thought)
    predictions = []

    async def run(base_url: str, api_key: str) -> None:
        with dspy.context(lm=lm(base_url, api_key)):
            program = dspy.ChainOfThought("question -> answer")
            predictions.append(await program.acall(question="What is 2 + 3?"))

    with recorded_cell(Cell("dspy", "inline", False, "chat", STRUCTURED)):
        items = await run_session(proxy, run)
        (prediction,) = predictions
        assert (prediction.reasoning, prediction.answer) == ("Two plus three is five.", "5")
        (call,) = items
        assert [m["role"] for m in call["messages"]] == ["system", "user"]
        assert_one_tree(items, ["root"])
        assert_reward_reaches_every_call(items)


async def test_react_steps_are_one_tree_linked_by_carry(make_proxy: ProxyFactory) -> None:
    steps = SENTENCE_STEPS
    proxy = await make_proxy(react_script(steps))
    predictions = []

    async def run(base_url: str, api_key: str) -> None:
        with dspy.context(lm=lm(base_url, api_key)):
            agent = dspy.ReAct("question -> answer", tools=[add], max_iters=5)
            predictions.append(await agent.acall(question=QUESTION))

    with recorded_cell(Cell("dspy", "inline", False, "chat", TOOL_LOOP)):
        items = await run_session(proxy, run)
        (prediction,) = predictions
        assert prediction.answer == ANSWER
        assert [prediction.trajectory[f"observation_{i}"] for i in range(3)] == [
            5,
            9,
            "Completed.",
        ]
        # Every call is a system message and one user message; the later ones hold the
        # trajectory so far, the earlier calls' replies re-rendered field by field.
        assert all([m["role"] for m in item["messages"]] == ["system", "user"] for item in items)
        last = content_text(items[-1]["messages"][-1])
        assert f"[[ ## thought_1 ## ]]\n{steps[1][0]}" in last
        assert "[[ ## observation_1 ## ]]\n9" in last
        assert_one_tree(items, ["root", "carry", "carry", "carry"])
        ids = [item["interaction_id"] for item in items]
        assert [item["parent_id"] for item in items] == [None, *ids[:-1]]
        assert_reward_reaches_every_call(items)


@pytest.mark.parametrize(
    "adapter",
    [
        pytest.param(dspy.ChatAdapter, id="chat-adapter"),
        pytest.param(dspy.JSONAdapter, id="json-adapter"),
    ],
)
async def test_pydantic_output_field_is_parsed(
    make_proxy: ProxyFactory, adapter: type[dspy.Adapter]
) -> None:
    def reply(
        messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
    ) -> str:
        if adapter is dspy.JSONAdapter:
            # JSONAdapter's prompt asks for one JSON object with the output fields.
            return json.dumps({"forecast": PARIS.model_dump()}, separators=(",", ":"))
        return forecast_reply(messages, tools, turn)

    proxy = await make_proxy(reply)
    predictions = []

    async def run(base_url: str, api_key: str) -> None:
        with dspy.context(lm=lm(base_url, api_key), adapter=adapter()):
            predictions.append(await dspy.Predict(WeatherForecast).acall(city="Paris"))

    with recorded_cell(Cell("dspy", "inline", False, "chat", STRUCTURED)):
        items = await run_session(proxy, run)
        (prediction,) = predictions
        assert prediction.forecast == PARIS
        assert_one_tree(items, ["root"])
        assert_reward_reaches_every_call(items)


async def test_streamed_react_answer_is_one_tree(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(react_script(SENTENCE_STEPS))
    chunks: list[dspy.streaming.StreamResponse] = []
    predictions: list[dspy.Prediction] = []

    async def run(base_url: str, api_key: str) -> None:
        with dspy.context(lm=lm(base_url, api_key)):
            agent = dspy.ReAct("question -> answer", tools=[add], max_iters=5)
            streaming = dspy.streamify(
                agent,
                stream_listeners=[dspy.streaming.StreamListener(signature_field_name="answer")],
            )
            async for value in streaming(question=QUESTION):
                if isinstance(value, dspy.streaming.StreamResponse):
                    chunks.append(value)
                elif isinstance(value, dspy.Prediction):
                    predictions.append(value)

    with recorded_cell(Cell("dspy", "inline", True, "chat", TOOL_LOOP)):
        items = await run_session(proxy, run)
        (prediction,) = predictions
        assert prediction.answer == ANSWER
        # The listener yielded the answer field's tokens as they came, and nothing else.
        assert {chunk.signature_field_name for chunk in chunks} == {"answer"}
        assert len(chunks) > 1
        assert "".join(chunk.chunk for chunk in chunks).strip() == ANSWER
        assert_one_tree(items, ["root", "carry", "carry", "carry"])
        assert_reward_reaches_every_call(items)
