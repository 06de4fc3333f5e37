"""The SDK's model on the proxy: an `AsyncOpenAI` client on the episode's connection, wrapped as
the Chat Completions or Responses model, and a run config that sends every agent of a run to it.
"""

from __future__ import annotations

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


def proxy_model(client: AsyncOpenAI, api: Api = "chat", model: str = "rltap") -> Model:
    """The SDK's model over `client`: Chat Completions (`api="chat"`) or Responses."""
    if check_api(api) == "chat":
        return OpenAIChatCompletionsModel(model=model, openai_client=client)
    return OpenAIResponsesModel(model=model, openai_client=client)


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
    """A `RunConfig` whose every model call goes to `model`, with tracing off.

    Tracing is disabled per run rather than globally: the SDK's default exporter uploads traces
    to api.openai.com with OPENAI_API_KEY, which in subprocess mode holds the proxy session key.
    """
    return RunConfig(
        model=model,
        model_provider=ProxyModelProvider(model),
        model_settings=model_settings,
        tracing_disabled=True,
        **options,
    )
