"""`LangChainAdapter`: a LangChain chain or agent as an rltap agent, `run(data, **kwargs)`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_openai import ChatOpenAI

from rltap.adapter import (
    AgentAdapter,
    Api,
    Connection,
    InputFn,
    RewardFn,
    check_api,
    check_framework,
)
from rltap_langchain._client import episode_http_clients, proxy_chat_model
from rltap_langchain._requirements import FRAMEWORK_REQUIREMENT, LANGCHAIN_REQUIREMENT

__all__ = ["Build", "LangChainAdapter", "final_text"]

Build = Callable[[ChatOpenAI, Any], Runnable[Any, Any]]


class LangChainAdapter(AgentAdapter):
    """Runs what `build(llm, data)` returns on one dataset row, with `llm` on the rltap proxy.

    Usage:
        def build(llm: ChatOpenAI, data: dict) -> Runnable:
            return ChatPromptTemplate.from_template("{question}") | llm | StrOutputParser()

        def exact_match(answer: str, data: dict) -> float:
            return float(answer.strip() == data["answer"])

        agent = LangChainAdapter(build, reward_fn=exact_match)
        # rltap runs `await agent.run(row, base_url=..., api_key=..., http_client=...)`

    `build` may return any Runnable: an LCEL chain, the chat model itself, or a tool agent from
    `langchain.agents.create_agent(llm, tools)`. The runnable gets `input_fn(data)` (default:
    the row itself) through `ainvoke`, or `invoke` in a worker thread when `sync=True` (the
    chat model then uses a sync HTTP client the adapter opens for the episode).

    Every call goes to /v1/chat/completions (`api="chat"`) or /v1/responses (`api="responses"`);
    `stream=True` makes every call a server-sent-event stream (usage included). `chat_kwargs`
    go to `ChatOpenAI` (temperature, max_tokens, ...). The reward is `reward_fn(result, data)`,
    or the runnable's result itself when no `reward_fn` is given (see `AgentAdapter`).

    `build`, `input_fn` and `reward_fn` must be module-level functions: subprocess mode pickles
    the adapter into a worker.
    """

    requirement: ClassVar[str] = FRAMEWORK_REQUIREMENT
    langchain_requirement: ClassVar[str] = LANGCHAIN_REQUIREMENT

    def __init__(
        self,
        build: Build,
        *,
        api: Api = "chat",
        stream: bool = False,
        sync: bool = False,
        reward_fn: RewardFn | None = None,
        input_fn: InputFn | None = None,
        chat_kwargs: Mapping[str, Any] | None = None,
        model: str = "rltap",
    ) -> None:
        super().__init__(reward_fn=reward_fn, model=model)
        self.langchain_version = check_framework(self.langchain_requirement)
        if not callable(build):
            msg = f"build must be a callable (llm, data) -> Runnable, got {type(build).__name__}"
            raise TypeError(msg)
        self.build = build
        self.api = check_api(api)
        self.stream = stream
        self.sync = sync
        self.input_fn = input_fn
        self.chat_kwargs = dict(chat_kwargs or {})

    async def _run(self, data: Any, connection: Connection, **kwargs: Any) -> Any:
        config: RunnableConfig | None = kwargs.pop("config", None)
        if kwargs:
            msg = f"unexpected keyword arguments for LangChainAdapter.run: {sorted(kwargs)}"
            raise TypeError(msg)
        async with episode_http_clients(connection) as (sync_client, async_client):
            llm = proxy_chat_model(
                connection,
                http_client=sync_client,
                http_async_client=async_client,
                model=self.model,
                api=self.api,
                stream=self.stream,
                chat_kwargs=self.chat_kwargs,
            )
            runnable = self.build(llm, data)
            if not isinstance(runnable, Runnable):
                msg = (
                    f"build returned {type(runnable).__name__}, not a Runnable: return a chain "
                    "(prompt | llm | parser), the llm, or an agent from create_agent"
                )
                raise TypeError(msg)
            inputs = data if self.input_fn is None else self.input_fn(data)
            # What LangChain raises (HTTP errors, error events in a stream): the base class maps it.
            if self.sync:
                return await asyncio.to_thread(runnable.invoke, inputs, config)
            return await runnable.ainvoke(inputs, config)


def final_text(result: Any) -> str:
    """The final answer's text in what a LangChain runnable returned, for reward functions.

    Handles a string (a chain ending in `StrOutputParser`), a message (a chat model or a chain
    ending in one, Responses content blocks included), and an agent's state
    (`create_agent(...)` returns `{"messages": [...]}`: the last AI message counts).
    Anything else is turned into its `str()`.
    """
    if isinstance(result, str):
        return result
    if isinstance(result, BaseMessage):
        return str(result.text)  # a str subclass that is also callable
    if isinstance(result, Mapping) and isinstance(result.get("messages"), Sequence):
        replies = [m for m in result["messages"] if isinstance(m, AIMessage)]
        return str(replies[-1].text) if replies else ""
    return str(result)
