"""Naming the agent behind every model call: `X-Rltap-Agent: <Agent.name>`, so the proxy records
each call under the agent that made it (`rltap.tree.links`), and exports can keep some agents only.

The SDK tells the model nothing about the agent that calls it. What does see the agent right
before each model call, of the starting agent, of handoff targets and of agents run as tools
(whose nested runs inherit the run config), is the run config's `call_model_input_filter`: it
records the agent's name in a context variable, and the proxy's models (`_client`) send that name
as a header through `ModelSettings.extra_headers`. The filter runs in the task that then calls
the model, so the value reaches that call; a tool running in its own task (an agent as a tool,
parallel tool calls) sets its own copy and never changes what the caller sends. `RunHooks.
on_llm_start` would not do: the SDK runs hooks in child tasks, whose context variables are lost
when they end, and an agent as a tool does not inherit the run's hooks.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from rltap.tree.links import AGENT_HEADER, agent_header_value, names_agent

if TYPE_CHECKING:
    from agents import ModelSettings
    from agents.run import CallModelData, CallModelInputFilter, ModelInputData

__all__ = ["agent_naming_filter", "with_agent_header"]

_CALLING_AGENT: ContextVar[str | None] = ContextVar("rltap_calling_agent", default=None)


def agent_naming_filter(user_filter: CallModelInputFilter | None = None) -> CallModelInputFilter:
    """A `call_model_input_filter` that records the calling agent's name, then applies
    `user_filter` (if any) and returns what it returns."""

    async def name_agent(data: CallModelData[Any]) -> ModelInputData:
        _CALLING_AGENT.set(agent_header_value(data.agent.name))
        if user_filter is None:
            return data.model_data
        filtered = user_filter(data)
        return await filtered if inspect.isawaitable(filtered) else filtered

    return name_agent


def with_agent_header(model_settings: ModelSettings) -> ModelSettings:
    """`model_settings` with the calling agent's `X-Rltap-Agent` header added; a header of that
    name the settings already carry (the user's own) is kept."""
    agent = _CALLING_AGENT.get()
    headers: Mapping[str, Any] = model_settings.extra_headers or {}
    if agent is None or names_agent(headers):
        return model_settings
    return dataclasses.replace(model_settings, extra_headers={**headers, AGENT_HEADER: agent})
