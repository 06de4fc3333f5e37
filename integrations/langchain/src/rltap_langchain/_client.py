"""`ChatOpenAI` on an rltap connection, with the HTTP clients it needs for one episode."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from langchain_openai import ChatOpenAI

from rltap.adapter import Api, Connection
from rltap_langchain._agents import AgentNamedChatOpenAI

__all__ = ["episode_http_clients", "proxy_chat_model"]

# Generation on a real model can take minutes; the workflow's own client uses the same limits.
_TIMEOUT = httpx.Timeout(3600.0, connect=30.0)


@contextlib.asynccontextmanager
async def episode_http_clients(
    connection: Connection,
) -> AsyncIterator[tuple[httpx.Client, httpx.AsyncClient]]:
    """A sync client (ours) and an async one (the workflow's, else ours) for one episode.

    The clients this opens are closed when the block ends; an injected async client stays open
    because the workflow owns it. Without one (subprocess mode) a fresh async client is needed:
    langchain-openai's default is cached per base URL across calls, and each subprocess episode
    runs in a new event loop that the cached client's connections would outlive.
    """
    async with contextlib.AsyncExitStack() as stack:
        sync_client = stack.enter_context(httpx.Client(timeout=_TIMEOUT))
        async_client = connection.http_client
        if async_client is None:
            async_client = await stack.enter_async_context(httpx.AsyncClient(timeout=_TIMEOUT))
        yield sync_client, async_client


def proxy_chat_model(
    connection: Connection,
    *,
    http_client: httpx.Client,
    http_async_client: httpx.AsyncClient,
    model: str = "rltap",
    api: Api = "chat",
    stream: bool = False,
    chat_kwargs: Mapping[str, Any] | None = None,
) -> ChatOpenAI:
    """A `ChatOpenAI` that talks to the proxy of `connection` and nothing else.

    `api="responses"` sends every call to /v1/responses instead of /v1/chat/completions;
    `stream=True` makes every call, `invoke` included, an SSE stream with a usage chunk at
    its end. Retries are off unless `chat_kwargs` turns them on: the proxy is local, and an error
    from it (engine failure, session gone) is the episode's outcome, not a network hiccup.
    `chat_kwargs` (temperature, max_tokens, ...) are passed on, but cannot move the model off
    the proxy: the connection's url, key and clients always win. Each call names the agent making
    it in the `X-Rltap-Agent` header when LangChain names one (`rltap_langchain._agents`).
    """
    options: dict[str, Any] = {"max_retries": 0, **(chat_kwargs or {})}
    options.update(
        model=model,
        base_url=connection.base_url,
        api_key=connection.api_key,
        http_client=http_client,
        http_async_client=http_async_client,
        use_responses_api=api == "responses",
        streaming=stream,
        # Only streamed calls read it: their last chunk then carries the token counts.
        stream_usage=True,
    )
    return AgentNamedChatOpenAI(**options)
