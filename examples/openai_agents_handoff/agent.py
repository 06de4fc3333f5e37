"""An OpenAI Agents SDK triage agent that hands each question over to a specialist: the
"Math Specialist" (a `calculate` tool) or the "Text Specialist" (a `count_letters` tool), who
answers it. Each agent can be its own policy (its own LoRA adapter over one base model):

    rltap train examples/openai_agents_handoff/agent.py:Agent \
        --data examples/openai_agents_handoff/data.jsonl \
        --policy "triage=Triage:8" --policy "specialists=Math Specialist,Text Specialist:8" ...

The reward (`reward`), returned by the episode and so put on the final reply:

- 1.0 when the final reply's last number is the row's `answer`;
- else `HANDOFF_CREDIT` (0.3) when the run ended with the row's `specialist`, the agent the
  triage agent should have handed over to (`RunResult.last_agent`);
- else 0.0.

The handoff credit is there to train the triage agent: whether it picked the right specialist is
its own decision, and an untrained model gets it right about half the time, so a group of
episodes carries a signal even when nobody gets the number right. (The names matter to a random
model: the tiny test model picks `transfer_to_text_specialist` over `..._math_specialist` about
as often as not, but `..._word_specialist` 96 times in 100, which leaves most groups without a
signal.) It stays below a right answer, so
handing over to the right specialist and then answering wrong never beats answering right. The
triage call earns it through the tree: its call is the `handoff` parent of the specialist's, so
the reward of the specialist's final reply flows back to it, discounted per link (`--discount`).

The triage agent must hand over on its first call (`tool_choice="required"`, one call): rltap's
engine decodes that call under a grammar of the handoff tools, so even an untrained model writes
a valid `transfer_to_...` call and the episode always reaches a specialist. The specialists
choose freely (tool or answer).

Everything the rollout pickles (subprocess mode) or calls lives at module level.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from typing import Any

import agents

from rltap_openai_agents import OpenAIAgentsAdapter

TRIAGE, MATH, TEXT = "Triage", "Math Specialist", "Text Specialist"
HANDOFF_CREDIT = 0.3
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_OPERATORS: dict[type[ast.AST], Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def evaluate(expression: str) -> float:
    """The value of an arithmetic expression: numbers, + - * / and parentheses only (the model's
    text is never handed to eval())."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        msg = f"only numbers and + - * / are allowed, got {type(node).__name__}"
        raise ValueError(msg)

    return value(ast.parse(expression, mode="eval").body)


@agents.function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. "12 * (3 + 4)".

    Args:
        expression: numbers with + - * / and parentheses.
    """
    result = evaluate(expression)
    return str(int(result)) if result.is_integer() else f"{result:.6g}"


@agents.function_tool
def count_letters(word: str, letter: str = "") -> str:
    """Count the letters of a word, or how often one letter occurs in it.

    Args:
        word: the word.
        letter: a single letter to count; empty counts every letter.
    """
    if letter:
        return str(word.lower().count(letter.lower()))
    return str(sum(c.isalpha() for c in word))


def build_agent(row: Any) -> agents.Agent[Any]:
    """The triage agent with its two specialists, built anew for each episode."""
    math_agent = agents.Agent(
        name=MATH,
        instructions="You solve arithmetic. Use the calculate tool, then reply with the number.",
        tools=[calculate],
    )
    text_agent = agents.Agent(
        name=TEXT,
        instructions="You answer questions about words. Use count_letters, then reply with "
        "the number.",
        tools=[count_letters],
    )
    return agents.Agent(
        name=TRIAGE,
        instructions="Hand the question over to the specialist for it: arithmetic to the Math "
        "Specialist, questions about words and letters to the Text Specialist.",
        handoffs=[math_agent, text_agent],
        model_settings=agents.ModelSettings(tool_choice="required", parallel_tool_calls=False),
    )


def last_number(text: str) -> float | None:
    """The last number in `text` ("12 * 7 = 84." gives 84), None without one."""
    numbers = NUMBER.findall(text)
    return float(numbers[-1]) if numbers else None


def reward(result: Any, row: Any) -> float:
    """1.0 for the right number, else `HANDOFF_CREDIT` for ending with the right specialist."""
    if last_number(str(result.final_output)) == float(row["answer"]):
        return 1.0
    return HANDOFF_CREDIT if result.last_agent.name == row["specialist"] else 0.0


class Agent(OpenAIAgentsAdapter):
    """The triage agent and its specialists over Chat Completions; `run(row)` returns `reward`."""

    def __init__(self) -> None:
        super().__init__(build_agent, api="chat", max_turns=6, reward_fn=reward)
