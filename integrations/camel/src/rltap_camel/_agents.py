"""Agent names on the wire: each CAMEL agent's calls carry its role name (`X-Rltap-Agent`).

CAMEL names its agents in their system messages (`BaseMessage.role_name`: a RolePlaying's
assistant and user roles, a critic's role), yet hands the model backend nothing of the agent that
calls it, and a RolePlaying gives both role agents the same backend. So an agent is named by
giving it a backend of its own that sends the name (`ProxyModel.for_agent`); `name_agents` does
so for every agent CAMEL named, once it is built and before it makes a call.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from camel.agents import ChatAgent
from camel.models import ModelManager
from camel.societies import RolePlaying

from rltap_camel._client import ProxyModel

__all__ = ["name_agents"]

logger = logging.getLogger(__name__)

# The role name `BaseMessage.make_system_message` gives a system prompt passed as a plain
# string: CAMEL's default, not a name anyone chose.
_DEFAULT_SYSTEM_ROLE = "System"

Named = TypeVar("Named", ChatAgent, RolePlaying)


def _role_name(agent: ChatAgent) -> str | None:
    """The role name CAMEL gave `agent` in its system message, or None when it has none (no
    system message, or a plain-string one, which CAMEL calls "System")."""
    message = agent.system_message
    if message is None or not message.role_name or message.role_name == _DEFAULT_SYSTEM_ROLE:
        return None
    return message.role_name


def name_agents(target: Named) -> Named:
    """Make each agent of `target` send its CAMEL role name with every call; returns `target`.

    Usage:
        society = name_agents(RolePlaying("Math Tutor", "Student", model=model, ...))
        # the assistant's calls carry X-Rltap-Agent: Math Tutor, the user's: Student

    A `RolePlaying` names its assistant, its user and a critic agent; a `ChatAgent` itself. Each
    named agent gets its own `ProxyModel.for_agent(role name)` on the same connection (other
    backends are left alone). An agent without a role name, or with one over 256 characters,
    sends none and the proxy derives its id.

    Call it before the agents' first step. RolePlaying's task-specify agent has made its call
    by the time the society is built: name it with
    `task_specify_agent_kwargs={"model": model.for_agent("Task Specifier")}`.
    """
    agents = [target] if isinstance(target, ChatAgent) else _society_agents(target)
    for agent in agents:
        name = _role_name(agent)
        if name is None:
            continue
        try:
            agent.model_backend = _named(agent.model_backend, name)
        except ValueError as exc:  # an overlong name: the proxy derives the id
            logger.warning("agent %r sends no X-Rltap-Agent: %s", name, exc)
    return target


def _society_agents(society: RolePlaying) -> list[ChatAgent]:
    agents = [society.assistant_agent, society.user_agent]
    if isinstance(society.critic, ChatAgent):  # a CriticAgent; a Human critic calls no model
        agents.append(society.critic)
    return agents


def _named(manager: ModelManager, name: str) -> ModelManager:
    models = manager.models
    if not any(isinstance(model, ProxyModel) for model in models):
        return manager
    named = [model.for_agent(name) if isinstance(model, ProxyModel) else model for model in models]
    return ModelManager(named, scheduling_strategy=manager.scheduling_strategy.__name__)
