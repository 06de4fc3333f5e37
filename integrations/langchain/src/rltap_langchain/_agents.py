"""The agent a LangChain model call belongs to, sent to the proxy as `X-Rltap-Agent`.

`create_agent(..., name="researcher")` puts `lc_agent_name` into the metadata of every run
inside that agent, model calls included; middleware marks the model calls it makes itself with
`lc_source` (`"summarization"` for `SummarizationMiddleware`). A call inside a named agent is
sent as that agent (`researcher`); a middleware's call inside it as `researcher/<lc_source>`, a
helper of its own and not the agent's turn (so a summary made while a tool call is open links
as a `subagent`, see `rltap.tree.links`). A call outside any named agent sends no header, and the
proxy derives the agent from the system prompt and tools.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_openai import ChatOpenAI

from rltap.tree.links import AGENT_HEADER, agent_header_value, names_agent

__all__ = ["AgentNamedChatOpenAI", "agent_name"]

AGENT_NAME_KEY = "lc_agent_name"
SOURCE_KEY = "lc_source"


def agent_name(config: RunnableConfig | None, own_metadata: Mapping[str, Any] | None) -> str | None:
    """The agent of a model call run with `config`: what `on_chat_model_start` would see as
    `lc_agent_name` (and `lc_source`), or None when no agent names it (or the name is blank).

    The run's metadata is what the parent run passes down (its callback manager's metadata),
    then the config's own, then the model's: the same merge LangChain makes for the callbacks.
    """
    config = ensure_config(config)
    metadata: dict[str, Any] = {}
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        metadata.update(callbacks.metadata)
    metadata.update(config.get("metadata") or {})
    metadata.update(own_metadata or {})
    name = metadata.get(AGENT_NAME_KEY)
    if not isinstance(name, str) or not name.strip():
        return None
    source = metadata.get(SOURCE_KEY)
    return f"{name.strip()}/{source}" if isinstance(source, str) and source else name


class AgentNamedChatOpenAI(ChatOpenAI):
    """`ChatOpenAI` that names, per call, the LangChain agent making it (`X-Rltap-Agent`).

    Covers every Runnable entry point (`invoke`, `ainvoke`, `stream`, `astream`; `batch` and the
    event streams go through them, and so do `bind_tools` and `with_structured_output`). The
    header goes as the openai SDK's per-request `extra_headers`; one the user set already, in
    `default_headers` or a call's `extra_headers`, wins.
    """

    def _agent_kwargs(
        self, config: RunnableConfig | None, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        extra: Mapping[str, str] | None = kwargs.get("extra_headers")
        if names_agent(self.default_headers) or names_agent(extra):
            return kwargs
        agent = agent_name(config, self.metadata)
        # A name a header cannot carry as is travels percent-encoded; an overlong one names nobody.
        value = None if agent is None else agent_header_value(agent)
        if value is None:
            return kwargs
        return {**kwargs, "extra_headers": {**(extra or {}), AGENT_HEADER: value}}

    def invoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        return super().invoke(input, config, stop=stop, **self._agent_kwargs(config, kwargs))

    async def ainvoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        named = self._agent_kwargs(config, kwargs)
        return await super().ainvoke(input, config, stop=stop, **named)

    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        yield from super().stream(input, config, stop=stop, **self._agent_kwargs(config, kwargs))

    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        named = self._agent_kwargs(config, kwargs)
        async for chunk in super().astream(input, config, stop=stop, **named):
            yield chunk
