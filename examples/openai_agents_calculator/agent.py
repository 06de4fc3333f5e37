"""An OpenAI Agents SDK agent with a calculator tool, rewarded by exact match of its final answer
(`Agent`), or with partial credit for the format and the tool call (`ShapedAgent`, to train).

    rltap rollout examples/openai_agents_calculator/agent.py:Agent \
        --data examples/openai_agents_calculator/data.jsonl ...

Everything the rollout pickles (subprocess mode) or calls lives at module level: the tool, the
function that builds the SDK agent for a row, and the reward.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable
from typing import Any

import agents

from rltap_openai_agents import OpenAIAgentsAdapter

INSTRUCTIONS = (
    "You are a careful calculator. Use the calculate tool for every computation, then reply "
    "with one line: 'Final answer: <number>'."
)
MARKER = "final answer:"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_OPERATORS: dict[type[ast.AST], Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _evaluate(node: ast.AST) -> float:
    # Only numbers and + - * / **: the model's text is never handed to eval().
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        if isinstance(node.op, ast.Pow) and abs(_evaluate(node.right)) > 64:
            msg = "exponent too large"
            raise ValueError(msg)
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    msg = f"only numbers and + - * / ** are allowed, got {type(node).__name__}"
    raise ValueError(msg)


def format_number(value: float) -> str:
    """`5.0` -> "5", `2.5` -> "2.5": how answers are written in data.jsonl."""
    return str(int(value)) if value.is_integer() else f"{value:.6g}"


@agents.function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. "12 * (3 + 4)".

    Args:
        expression: numbers with + - * / ** and parentheses.
    """
    return calculate_value(expression)


def calculate_value(expression: str) -> str:
    """What `calculate` returns for `expression` (raises on anything but arithmetic)."""
    return format_number(_evaluate(ast.parse(expression, mode="eval").body))


def build_agent(row: Any) -> agents.Agent[Any]:
    return agents.Agent(name="calculator", instructions=INSTRUCTIONS, tools=[calculate])


def final_answer(text: str) -> str:
    """The line after the last "Final answer:" (the whole text without one), trimmed."""
    found = text.lower().rfind(MARKER)
    answer = text[found + len(MARKER) :] if found >= 0 else text
    lines = answer.strip().splitlines() or [""]
    return lines[0].strip().rstrip(".").strip()


def answer_number(text: str) -> float | None:
    """The last number of the final answer ("12 + 6 = 18." gives 18), None without one."""
    numbers = NUMBER.findall(final_answer(text))
    return float(numbers[-1]) if numbers else None


def exact_match(result: Any, row: Any) -> float:
    """1.0 when the final answer's number is the row's answer, else 0.0."""
    return float(answer_number(str(result.final_output)) == float(row["answer"]))


FORMAT = re.compile(r"final answer:\s*-?\d+(?:\.\d+)?", re.IGNORECASE)
FORMAT_CREDIT = 0.2
TOOL_CREDIT = 0.2
CLOSENESS_CREDIT = 0.3


def right_tool_call(result: Any, row: Any) -> bool:
    """Whether the agent called `calculate` with an expression whose value is the answer."""
    for item in result.new_items:
        if isinstance(item, agents.ToolCallItem) and getattr(item.raw_item, "name", "") == (
            "calculate"
        ):
            try:
                expression = json.loads(item.raw_item.arguments)["expression"]
                if calculate_value(expression) == str(row["answer"]):
                    return True
            except (ValueError, KeyError, TypeError, SyntaxError, ZeroDivisionError):
                continue
    return False


def closeness(text: str, answer: str) -> float:
    """How near the final answer's number is to the answer: 1 - |error| / max(|answer|, 1),
    down to 0 (and 0 with no number)."""
    number = answer_number(text)
    if number is None:
        return 0.0
    expected = float(answer)
    return max(0.0, 1.0 - abs(number - expected) / max(abs(expected), 1.0))


def shaped_reward(result: Any, row: Any) -> float:
    """1.0 for the right final answer; otherwise 0.2 for a reply ending in 'Final answer:
    <number>', 0.2 for a `calculate` call with the right expression and 0.3 times how near the
    final answer is (`closeness`): at most 0.7.

    Why shaped: SmolLM2-135M-Instruct scored 0.0 on exact match in `make demo` (a group of
    zeros carries no signal); the credits reward the two steps the instructions ask for and a
    near miss, and stay below a right answer, so no mix of them beats it.
    """
    if exact_match(result, row):
        return 1.0
    text = str(result.final_output)
    marked = FORMAT.search(text) is not None
    return (
        FORMAT_CREDIT * marked
        + TOOL_CREDIT * right_tool_call(result, row)
        + CLOSENESS_CREDIT * closeness(text, row["answer"])
    )


class Agent(OpenAIAgentsAdapter):
    """The calculator agent over Chat Completions, streamed; `run(row)` returns its reward."""

    reward = staticmethod(exact_match)

    def __init__(self, api: Any = "chat", stream: bool = True) -> None:
        super().__init__(
            build_agent, api=api, stream=stream, max_turns=6, reward_fn=type(self).reward
        )


class ResponsesAgent(Agent):
    """The same agent over the Responses API."""

    def __init__(self) -> None:
        super().__init__(api="responses", stream=False)


class ShapedAgent(Agent):
    """The calculator agent rewarded by `shaped_reward`: what `rltap train` trains
    (docs/learning.md; `--pass-threshold 1.0` still counts right answers only)."""

    reward = staticmethod(shaped_reward)
