"""A LangChain math chain trained with rltap: prompt | ChatOpenAI (with a calculator) | parser.

The chain asks the model; when the model calls the calculator, the chain runs it and asks again
with the result (one recorded interaction per model call, the second continuing the first).
The reward is an exact match of the reply's last number against the row's answer (`Agent`);
`ShapedAgent`, the one to train, adds partial credit for the answer's format (`shaped_reward`).

    rltap rollout examples/langchain_math/agent.py:Agent --data examples/langchain_math/data.jsonl
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompt_values import PromptValue
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from rltap_langchain import LangChainAdapter, final_text

SYSTEM = (
    "You solve arithmetic problems. Use the calculator tool for any computation, then reply "
    "with 'Final answer: <number>'."
)
MAX_TOOL_ROUNDS = 3

_OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    msg = f"not arithmetic: {ast.dump(node)}"
    raise ValueError(msg)


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as '12 * (3 + 4)' and return the result."""
    try:
        value = _evaluate(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as exc:
        return f"error: {exc}"
    return f"{value:g}"


def build_math_chain(llm: ChatOpenAI, data: Any) -> Runnable[Any, str]:
    """prompt | the model with its calculator (tool rounds included) | StrOutputParser."""
    model = llm.bind_tools([calculator])

    async def solve(prompt: PromptValue) -> AIMessage:
        messages: list[BaseMessage] = prompt.to_messages()
        reply = await model.ainvoke(messages)
        for _ in range(MAX_TOOL_ROUNDS):
            if not reply.tool_calls:
                break
            messages.append(reply)
            messages.extend([await calculator.ainvoke(call) for call in reply.tool_calls])
            reply = await model.ainvoke(messages)
        return reply

    prompt = ChatPromptTemplate.from_messages([("system", SYSTEM), ("user", "{question}")])
    return prompt | RunnableLambda(solve) | StrOutputParser()


def exact_match(result: Any, data: Any) -> float:
    """1.0 when the reply's last number equals the row's answer, else 0.0."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", final_text(result))
    return float(bool(numbers) and float(numbers[-1]) == float(data["answer"]))


FORMAT = re.compile(r"final answer:\s*-?\d+(?:\.\d+)?", re.IGNORECASE)
FORMAT_CREDIT = 0.2
CLOSENESS_CREDIT = 0.3


def closeness(text: str, answer: str) -> float:
    """How near the reply's last number is to the answer: 1 - |error| / max(|answer|, 1),
    down to 0 (and 0 with no number)."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    if not numbers:
        return 0.0
    expected = float(answer)
    return max(0.0, 1.0 - abs(float(numbers[-1]) - expected) / max(abs(expected), 1.0))


def shaped_reward(result: Any, data: Any) -> float:
    """1.0 for the right answer; otherwise 0.2 when the reply gives the asked-for
    'Final answer: <number>', plus 0.3 times how near its last number is to the answer
    (`closeness`): at most 0.5.

    Why shaped: SmolLM2-135M-Instruct answers these sums right about one time in thirty at
    temperature 1, mostly inside long explanations, and never in the asked-for format; a group
    where every episode earns the same reward carries no signal. The closeness credit differs
    between nearly any two replies and leans towards short replies that end on the sum; the
    credits stay below any right answer, so the policy cannot prefer a near miss.
    """
    text = final_text(result)
    if exact_match(result, data):
        return 1.0
    marked = FORMAT.search(text) is not None
    return FORMAT_CREDIT * marked + CLOSENESS_CREDIT * closeness(text, data["answer"])


class Agent(LangChainAdapter):
    """The math chain as an rltap agent (`rltap rollout ...agent.py:Agent`)."""

    reward = staticmethod(exact_match)

    def __init__(self, **options: Any) -> None:
        options.setdefault("chat_kwargs", {"temperature": 1.0, "max_tokens": 128})
        super().__init__(build_math_chain, reward_fn=type(self).reward, **options)


class ShapedAgent(Agent):
    """The math chain rewarded by `shaped_reward`: what `rltap train` trains
    (docs/learning.md; `--pass-threshold 1.0` still counts right answers only)."""

    reward = staticmethod(shaped_reward)
