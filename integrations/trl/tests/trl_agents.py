"""The agents the plugin's tests train and roll out, built with the LangChain adapter.

`calculator_agent`: examples/langchain_math's tool loop, two calls per episode. The tiny random
model cannot choose to call a tool, so the first call forces the calculator (`bind_tools(...,
tool_choice=...)`, which rltap honours with a grammar) and the expression is one of a few
(an enum, so the grammar ends the call in a few tokens); the second call answers with the
result. The reward is how near the calculator's result is to the row's answer, plus a little
for the reply's length, so episodes of one prompt earn different rewards.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from rltap_langchain import LangChainAdapter, final_text

Expression = Literal["2+3", "4*5", "9-7", "8/2", "6+7"]
SHORT = {"max_tokens": 8}
TOOL_CALL = {"max_tokens": 48}  # room for the whole forced call: the grammar ends it


@tool
def calculator(expression: Expression) -> str:
    """Evaluate one of the arithmetic expressions this calculator knows."""
    left, operator, right = expression[0], expression[1], expression[2]
    a, b = float(left), float(right)
    value = {"+": a + b, "*": a * b, "-": a - b, "/": a / b}[operator]
    return f"{value:g}"


def build_calculator_agent(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """prompt | a forced calculator call, the tool's result, then a free reply."""
    forced = llm.bind_tools([calculator], tool_choice="calculator").bind(**TOOL_CALL)
    free = llm.bind_tools([calculator]).bind(**SHORT)

    async def solve(prompt: PromptValue) -> dict[str, Any]:
        messages: list[BaseMessage] = prompt.to_messages()
        call = await forced.ainvoke(messages)
        assert isinstance(call, AIMessage), call
        assert call.tool_calls, call
        result: ToolMessage = await calculator.ainvoke(call.tool_calls[0])
        reply = await free.ainvoke([*messages, call, result])
        return {"tool": str(result.content), "reply": final_text(reply)}

    prompt = ChatPromptTemplate.from_messages(
        [("system", "Use the calculator, then answer."), ("user", "{question}")]
    )
    return prompt | RunnableLambda(solve)


def calculator_reward(result: dict[str, Any], data: Any) -> float:
    """1 - |tool result - answer| / max(|answer|, 1), at least 0, plus 0.01 per 10 characters
    of the reply (at most 0.1)."""
    answer = float(data["answer"])
    closeness = max(0.0, 1.0 - abs(float(result["tool"]) - answer) / max(abs(answer), 1.0))
    return round(closeness + min(0.1, 0.001 * len(result["reply"])), 6)


def calculator_agent() -> LangChainAdapter:
    return LangChainAdapter(
        build_calculator_agent, reward_fn=calculator_reward, chat_kwargs=dict(SHORT)
    )


def build_two_questions(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """Two independent calls (two roots of one episode: two branches)."""
    first = ChatPromptTemplate.from_messages([("user", "{question}")]) | llm
    second = ChatPromptTemplate.from_messages([("user", "Again: {question}")]) | llm
    return RunnableParallel(first=first, second=second)


def two_branch_agent() -> LangChainAdapter:
    return LangChainAdapter(
        build_two_questions, reward_fn=lambda result, data: 1.0, chat_kwargs=dict(SHORT)
    )


def build_chain(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """One call; raises for a row that says `fail`."""

    async def check(value: dict[str, Any]) -> dict[str, Any]:
        if value.get("fail"):
            msg = f"the agent fails on {value['question']!r}"
            raise RuntimeError(msg)
        return value

    return RunnableLambda(check) | ChatPromptTemplate.from_messages([("user", "{question}")]) | llm


def one_call_agent() -> LangChainAdapter:
    return LangChainAdapter(
        build_chain, reward_fn=lambda result, data: 0.5, chat_kwargs=dict(SHORT)
    )
