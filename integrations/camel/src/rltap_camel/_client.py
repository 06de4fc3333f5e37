"""CAMEL's OpenAI-compatible model backend, pointed at the rltap proxy.

CAMEL agents call `model.run` (sync: `ChatAgent.step`, `RolePlaying(...)`'s task-specify agent)
or `model.arun` (async: `astep`), and `OpenAICompatibleModel` takes a ready client for each
(`client=`, `async_client=`). An `httpx.AsyncClient` cannot serve a sync OpenAI client, so the
backend builds one client per side: the async side on the workflow's `httpx.AsyncClient` when it
was given one, the sync side on an `httpx.Client` of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from camel.models import OpenAICompatibleModel
from camel.utils import BaseTokenCounter

from rltap.adapter import Connection
from rltap.tree.links import AGENT_HEADER, agent_header_value
from rltap_camel._tokens import ByteTokenCounter

__all__ = ["DEFAULT_CONTEXT_WINDOW", "ProxyModel"]

# Tokens as the counter counts them (the default counts bytes, an upper bound); CAMEL trims and
# summarizes memory against this, the proxy enforces the engine's real limit.
DEFAULT_CONTEXT_WINDOW = 32_768
# Seconds per call: a long generation on a busy engine, not a hung connection.
DEFAULT_TIMEOUT = 600.0


@dataclass(slots=True)
class _Clients:
    """The OpenAI clients one episode's backends share, and which of them it must close."""

    sync: openai.OpenAI
    async_: openai.AsyncOpenAI
    owns_sync: bool
    owns_async: bool
    agent: str | None = None

    @classmethod
    def build(cls, connection: Connection, timeout: float, max_retries: int) -> _Clients:
        # Any: openai 3 types its clients' http_client as httpx2's, yet takes httpx's too.
        given: Any = connection.http_client
        options: dict[str, Any] = {
            "base_url": connection.base_url,
            "api_key": connection.api_key,
            "timeout": timeout,
            "max_retries": max_retries,
        }
        sync_http: Any = given if isinstance(given, httpx.Client) else httpx.Client(timeout=timeout)
        async_http: Any = given if isinstance(given, httpx.AsyncClient) else None
        return cls(
            sync=openai.OpenAI(http_client=sync_http, **options),
            async_=openai.AsyncOpenAI(http_client=async_http, **options),
            owns_sync=sync_http is not given,
            owns_async=async_http is None,
        )

    def for_agent(self, agent: str, header_value: str) -> _Clients:
        """Copies that name `agent` in `X-Rltap-Agent` (as `header_value`, its encoding) on the
        same http clients (owned by `self`)."""
        headers = {AGENT_HEADER: header_value}
        return _Clients(
            sync=self.sync.with_options(default_headers=headers),
            async_=self.async_.with_options(default_headers=headers),
            owns_sync=False,
            owns_async=False,
            agent=agent,
        )

    async def aclose(self) -> None:
        # OpenAI clients close their httpx client, also one they were handed: only close ours.
        if self.owns_sync:
            self.sync.close()
        if self.owns_async:
            await self.async_.close()


def _model_config(stream: bool, config: dict[str, Any] | None) -> dict[str, Any]:
    merged = dict(config or {})
    merged["stream"] = stream
    if stream:
        # Usage in the last chunk: CAMEL's token accounting reads it in stream mode.
        merged.setdefault("stream_options", {"include_usage": True})
    else:
        merged.pop("stream_options", None)  # the API refuses stream_options without stream
    return merged


class ProxyModel(OpenAICompatibleModel):
    """An `OpenAICompatibleModel` on the rltap proxy: every call lands in the episode's session.

    Usage:
        model = ProxyModel(connection, stream=True, config={"temperature": 0.7})
        agent = ChatAgent("You are a helpful tutor.", model=model, tools=[calculate])
        response = await agent.astep("What is 12 * 7?")

    `connection` gives the proxy URL, the session key and (inline mode) the workflow's
    `httpx.AsyncClient`, which serves the async side; the sync side gets an `httpx.Client` of
    its own. `stream` is CAMEL's `stream` model config; `config` holds the other sampling
    parameters sent with every call. The token counter defaults to `ByteTokenCounter` (CAMEL's
    default downloads a tiktoken file); `context_window` is the limit CAMEL trims memory to.
    `max_retries` defaults to 0: a retried call would be a second sample in the session.

    CAMEL turns a failed call into an error reply in stream mode; the backend remembers the
    failure so the adapter can still reject the episode (`raise_unanswered_failure`).

    `agent` is the name its calls send in the `X-Rltap-Agent` header (None: none, the proxy
    derives an id); `for_agent(name)` gives a named backend, `rltap_camel.name_agents` one per
    agent CAMEL names.
    """

    def __init__(
        self,
        connection: Connection,
        *,
        model: str = "rltap",
        stream: bool = False,
        config: dict[str, Any] | None = None,
        token_counter: BaseTokenCounter | None = None,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 0,
        _clients: _Clients | None = None,
    ) -> None:
        self._owns_clients = _clients is None
        self._clients = _clients or _Clients.build(connection, timeout, max_retries)
        super().__init__(
            model_type=model,
            model_config_dict=_model_config(stream, config),
            api_key=connection.api_key,
            url=connection.base_url,
            token_counter=token_counter or ByteTokenCounter(),
            timeout=timeout,
            max_retries=max_retries,
            client=self._clients.sync,
            async_client=self._clients.async_,
        )
        self.connection = connection
        self.context_window = context_window
        self._unanswered: BaseException | None = None
        self._options: dict[str, Any] = {
            "model": model,
            "token_counter": token_counter,
            "context_window": context_window,
            "timeout": timeout,
            "max_retries": max_retries,
        }

    @property
    def token_limit(self) -> int:
        """The context CAMEL trims memory to (`context_window`), not a lookup by model name."""
        return self.context_window

    @property
    def agent(self) -> str | None:
        """The agent name this backend's calls send (`X-Rltap-Agent`), or None."""
        return self._clients.agent

    def with_config(self, *, stream: bool | None = None, **config: Any) -> ProxyModel:
        """A backend on the same clients with changed model config, e.g. a non-streaming one for
        `RolePlaying`'s task-specify agent, or another temperature for the user agent."""
        return self._sibling(self._clients, stream, config)

    def for_agent(self, name: str) -> ProxyModel:
        """A backend on the same connection whose calls name their agent: `X-Rltap-Agent: name`.

        The proxy records `name` as the agent id of every call it makes, so an export can keep
        one agent's calls (`agents=[name]`). Any text is a name (what a header cannot carry is
        percent-encoded, `rltap.tree.links.agent_header_value`); a
        `ValueError` for a blank one or one
        over 256 characters.
        """
        value = agent_header_value(name)
        if value is None:
            msg = f"an agent name must have 1 to 256 characters besides spaces, got {name!r}"
            raise ValueError(msg)
        return self._sibling(self._clients.for_agent(name.strip(), value), None, {})

    def _sibling(
        self, clients: _Clients, stream: bool | None, config: dict[str, Any]
    ) -> ProxyModel:
        current = {k: v for k, v in self.model_config_dict.items() if k != "stream"}
        return ProxyModel(
            self.connection,
            stream=self.stream if stream is None else stream,
            config={**current, **config},
            _clients=clients,
            **self._options,
        )

    def _run(self, messages: Any, response_format: Any = None, tools: Any = None) -> Any:
        with self._tracking():
            _refuse_on_event_loop()
            return super()._run(messages, response_format, tools)

    async def _arun(self, messages: Any, response_format: Any = None, tools: Any = None) -> Any:
        with self._tracking():
            return await super()._arun(messages, response_format, tools)

    @contextlib.contextmanager
    def _tracking(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            self._unanswered = exc
            raise
        self._unanswered = None

    def raise_unanswered_failure(self) -> None:
        """Raise the error of the last call if it failed and no call succeeded since.

        An episode whose last call failed has no reply to reward, even when the framework
        returned normally (CAMEL's streaming step turns the error into an "Error: ..." reply).
        """
        if self._unanswered is not None:
            raise self._unanswered

    async def aclose(self) -> None:
        """Close the clients this backend built (never the workflow's http client)."""
        if self._owns_clients:
            await self._clients.aclose()


def _refuse_on_event_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop in this thread: a blocking call blocks nobody else
    msg = (
        "a sync CAMEL call (ChatAgent.step, RolePlaying.step, or RolePlaying(...) with its "
        "task-specify agent) ran on the event loop thread: it would block the loop, and in "
        "inline mode the proxy answering it runs on that loop. In an async episode use astep, "
        "or run sync code with `await asyncio.to_thread(...)`; or make the episode a plain def"
    )
    raise RuntimeError(msg)
