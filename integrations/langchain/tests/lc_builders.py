"""Chains, agents and reward functions the tests run, at module level so they pickle by name
(subprocess mode sends the adapter to a worker, which imports this module to rebuild them)."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessageChunk
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from rltap.adapter import check_api
from rltap.testing.scripts import FINAL_PREFIX
from rltap.testing.structured import Forecast, forecast_reward
from rltap_langchain import LangChainAdapter, final_text

# The calculator's fixed answer: the script's final reply quotes the tool result.
TOOL_RESULT = "5"
QUESTION = "What is 2+3?"


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result."""
    return TOOL_RESULT


def build_model(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """The chat model itself."""
    return llm


def build_chain(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """An LCEL chain: prompt | model | parser."""
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer briefly."), ("user", "{question}")]
    )
    return prompt | llm | StrOutputParser()


def build_agent(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """A tool agent: one calculator tool."""
    return create_agent(llm, tools=[calculator], system_prompt="Use the calculator.")


def build_by_kind(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """The chain or the agent, as the row says (one adapter, both kinds of episode)."""
    return build_agent(llm, data) if data["kind"] == "agent" else build_chain(llm, data)


def build_streamer(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """Consumes `llm.astream` itself and returns the chunks summed into one message."""

    async def stream(question: str) -> AIMessageChunk:
        total: AIMessageChunk | None = None
        async for chunk in llm.astream(question):
            total = chunk if total is None else total + chunk
        assert total is not None
        return total

    return RunnableLambda(stream)


def agent_input(data: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": data["question"]}]}


def input_by_kind(data: Any) -> Any:
    return agent_input(data) if data["kind"] == "agent" else {"question": data["question"]}


def expected_answer(data: Any) -> str:
    """What the tool-loop script answers: the tool result for the agent, an echo otherwise."""
    if data.get("kind") == "agent":
        return f"{FINAL_PREFIX} {TOOL_RESULT}"
    return f"Turn 0: you said: {data['question']}"


def exact_match(result: Any, data: Any) -> float:
    return float(final_text(result) == expected_answer(data))


def final_answer_reward(result: Any, data: Any) -> float:
    """The matrix's reward: 1.0 when the agent's final text is the scripted final answer."""
    return float(final_text(result).startswith(FINAL_PREFIX))


def make_adapter(*, tools: bool, stream: bool, wire_format: str) -> LangChainAdapter:
    """What the standard suite and the matrix run: the tool agent, or the plain chain.

    Rows are `{"question": str}`: the chain's prompt reads it directly, the agent gets it as its
    user message.
    """
    return LangChainAdapter(
        build_agent if tools else build_chain,
        api=check_api(wire_format),
        stream=stream,
        input_fn=agent_input if tools else None,
        reward_fn=final_answer_reward if tools else None,
    )


def build_json_schema_forecaster(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """`with_structured_output(Forecast, method="json_schema")`: the schema as response_format."""
    return llm.with_structured_output(Forecast, method="json_schema")


def build_function_calling_forecaster(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """`with_structured_output(Forecast, method="function_calling")`: a forced tool call."""
    return llm.with_structured_output(Forecast, method="function_calling")


def build_forecast_agent(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """`create_agent(response_format=Forecast)`: the agent's `structured_response`.

    Run it with `ONE_CALL`: the agent's tool strategy forces a call (tool_choice "any") but lets
    the model make several, and two structured calls are a MultipleStructuredOutputsError that
    LangChain answers with another model call. The random model makes two in ~3% of replies
    (5 of 150 measured), which would make the one-call episode these tests check a flake.
    """
    return create_agent(llm, tools=[], response_format=Forecast)


# ChatOpenAI's public `model_kwargs`: sent with every request, so the grammar allows one call.
ONE_CALL: dict[str, Any] = {"model_kwargs": {"parallel_tool_calls": False}}


def question_input(data: Any) -> str:
    return str(data["question"])


def structured_response_reward(result: Any, data: Any) -> float:
    """The structured cells' reward: 1.0 when the agent's structured_response is a `Forecast`."""
    return forecast_reward(result.get("structured_response"), data)


def make_structured_adapter(*, stream: bool, wire_format: str) -> LangChainAdapter:
    """What the matrix's structured-output cells run: `create_agent(response_format=Forecast)`."""
    return LangChainAdapter(
        build_forecast_agent,
        api=check_api(wire_format),
        stream=stream,
        input_fn=agent_input,
        reward_fn=structured_response_reward,
        chat_kwargs=ONE_CALL,
    )
