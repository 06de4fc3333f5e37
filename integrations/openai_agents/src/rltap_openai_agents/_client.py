"""The SDK's model on the proxy: an `AsyncOpenAI` client on the episode's connection, wrapped as
the Chat Completions or Responses model, and a run config that sends every agent of a run to it,
each call naming its agent (`_agent_names`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents import (
    Model,
    ModelProvider,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
)
from openai import AsyncOpenAI

from rltap.adapter import Api, Connection, check_api
from rltap_openai_agents._agent_names import agent_naming_filter, with_agent_header

__all__ = ["ProxyModelProvider", "proxy_client", "proxy_model", "proxy_run_config"]


def proxy_client(connection: Connection, *, max_retries: int = 0) -> AsyncOpenAI:
    """An `AsyncOpenAI` client for the proxy session behind `connection`.

    `max_retries` defaults to 0: a reply the proxy failed (502, 504) is a failed interaction, and
    rltap rejects the episode instead of sampling the turn again behind the trainer's back.
    """
    options: dict[str, Any] = {}
    if connection.http_client is not None:
        options["http_client"] = connection.http_client
    return AsyncOpenAI(
        base_url=connection.base_url,
        api_key=connection.api_key,
        max_retries=max_retries,
        **options,
    )


_SETTINGS_POSITION = 2  # `Model.get_response(system_instructions, input, model_settings, ...)`


def _named(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A model call's arguments with its model settings naming the calling agent."""
    if "model_settings" in kwargs:
        kwargs = {**kwargs, "model_settings": with_agent_header(kwargs["model_settings"])}
    elif len(args) > _SETTINGS_POSITION:
        settings = with_agent_header(args[_SETTINGS_POSITION])
        args = (*args[:_SETTINGS_POSITION], settings, *args[_SETTINGS_POSITION + 1 :])
    return args, kwargs


class _AgentNamingModel(Model):
    """Sends the calling agent's name with each call; comes before the SDK's model class in the
    bases of the two below. They subclass rather than wrap it: the SDK checks
    `isinstance(model, OpenAIChatCompletionsModel)` to decide how it replays the history.
    (`super()` is that SDK class, next in the method order, not the abstract `Model`.)"""

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = _named(args, kwargs)
        return await super().get_response(*args, **kwargs)  # type: ignore[safe-super]

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        args, kwargs = _named(args, kwargs)
        return super().stream_response(*args, **kwargs)  # type: ignore[safe-super]


class _ProxyChatCompletionsModel(_AgentNamingModel, OpenAIChatCompletionsModel):
    pass


class _ProxyResponsesModel(_AgentNamingModel, OpenAIResponsesModel):
    pass


def proxy_model(client: AsyncOpenAI, api: Api = "chat", model: str = "rltap") -> Model:
    """The SDK's model over `client`: Chat Completions (`api="chat"`) or Responses.

    In a run whose config comes from `proxy_run_config`, each call sends the calling agent's
    name as `X-Rltap-Agent`.
    """
    if check_api(api) == "chat":
        return _ProxyChatCompletionsModel(model=model, openai_client=client)
    return _ProxyResponsesModel(model=model, openai_client=client)


class ProxyModelProvider(ModelProvider):
    """Resolves every model name to the proxy's model.

    Agents that name a model (`Agent(model="gpt-4o")`), handoff targets and agents used as tools
    then still reach the proxy, never the vendor's API.
    """

    def __init__(self, model: Model) -> None:
        self.model = model

    def get_model(self, model_name: str | None) -> Model:
        return self.model


def proxy_run_config(
    model: Model, *, model_settings: ModelSettings | None = None, **options: Any
) -> RunConfig:
    """A `RunConfig` whose every model call goes to `model`, with tracing off, naming its agent.

    Tracing is disabled per run rather than globally: the SDK's default exporter uploads traces
    to api.openai.com with OPENAI_API_KEY, which in subprocess mode holds the proxy session key.
    Each call of every agent of the run (handoff targets and agents run as tools, unless
    `as_tool` gets a run config of its own) sends `X-Rltap-Agent: <Agent.name>`: the config's
    `call_model_input_filter` records the agent; a `call_model_input_filter` in `options` still
    runs, after it.
    """
    user_filter = options.pop("call_model_input_filter", None)
    return RunConfig(
        model=model,
        model_provider=ProxyModelProvider(model),
        model_settings=model_settings,
        tracing_disabled=True,
        call_model_input_filter=agent_naming_filter(user_filter),
        **options,
    )
