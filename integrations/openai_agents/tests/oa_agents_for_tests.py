"""Agent parts the tests share, at module level so that subprocess workers can unpickle them."""

from __future__ import annotations

import ast
import operator
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool

from rltap.testing.structured import Forecast, forecast_reward
from rltap_dev.matrix import final_answer_reward
from rltap_openai_agents import OpenAIAgentsAdapter

FINAL_ANSWER = "Final answer: 5"  # tool_loop calls calculate("2+3"), then answers with its result

_OPERATORS: dict[type[ast.operator], Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.expr) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    msg = f"unsupported expression: {ast.dump(node)}"
    raise ValueError(msg)


@function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression such as 2+3."""
    return f"{_evaluate(ast.parse(expression, mode='eval').body):g}"


def build_calculator(data: Any) -> Agent[Any]:
    return Agent(
        name="calculator",
        instructions="Answer with the calculator tool.",
        tools=[calculate],
        model="gpt-4o",  # any name: the adapter's run config sends it to the proxy
    )


def build_orchestrator(data: Any) -> Agent[Any]:
    """An agent whose only tool is another agent (agents-as-tools)."""
    inner = build_calculator(data)
    return Agent(
        name="orchestrator",
        instructions="Delegate arithmetic.",
        tools=[inner.as_tool(tool_name="ask_calculator", tool_description="Does arithmetic.")],
    )


def exact_match(result: Any, data: Any) -> float:
    return float(str(result.final_output).strip() == data["answer"])


async def run_it_myself(run_config: RunConfig, data: Any) -> float:
    """The episode mode: the user's own Runner.run, returning the reward."""
    result = await Runner.run(build_calculator(data), data["question"], run_config=run_config)
    return 1.0 if result.final_output == data["answer"] else 0.0


def build_chat_agent(data: Any) -> Agent[Any]:
    """A plain agent without tools (the scripted `echo` repeats the question)."""
    return Agent(name="chat", instructions="Answer briefly.")


def final_output_reward(result: Any, data: Any) -> float:
    """The matrix's reward (1.0 for the scripted final answer), read from the run's final output."""
    return final_answer_reward(result.final_output, data)


def make_adapter(*, tools: bool, stream: bool, wire_format: str) -> OpenAIAgentsAdapter:
    """The agent the standard suite and the matrix run: the calculator, or a plain chat agent."""
    return OpenAIAgentsAdapter(
        build_calculator if tools else build_chat_agent,
        api=wire_format,  # type: ignore[arg-type]
        stream=stream,
        reward_fn=final_output_reward,
    )


def build_forecaster(data: Any) -> Agent[Any]:
    """An agent whose final output is a `Forecast` (the SDK sends its JSON schema)."""
    return Agent(
        name="forecaster", instructions="Forecast tomorrow's weather.", output_type=Forecast
    )


async def forecast_run(run_config: RunConfig, data: Any) -> Any:
    """The episode mode: `Runner.run` of the forecaster, returning its final output."""
    result = await Runner.run(build_forecaster(data), data["question"], run_config=run_config)
    return result.final_output


async def forecast_run_streamed(run_config: RunConfig, data: Any) -> Any:
    """The episode mode: `Runner.run_streamed`, its events consumed, returning the final output."""
    result = Runner.run_streamed(build_forecaster(data), data["question"], run_config=run_config)
    async for _ in result.stream_events():
        pass
    return result.final_output


def final_forecast_reward(result: Any, data: Any) -> float:
    """The structured cells' reward: 1.0 when the run's final output is a parsed `Forecast`."""
    return forecast_reward(result.final_output, data)


def make_structured_adapter(*, stream: bool, wire_format: str) -> OpenAIAgentsAdapter:
    """The agent the matrix's structured-output cells run: `output_type=Forecast`."""
    return OpenAIAgentsAdapter(
        build_forecaster,
        api=wire_format,  # type: ignore[arg-type]
        stream=stream,
        reward_fn=final_forecast_reward,
    )
