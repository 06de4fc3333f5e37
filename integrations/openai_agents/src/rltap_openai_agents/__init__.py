"""rltap adapter for the OpenAI Agents SDK: every LLM call of an `agents.Agent` run, recorded at
the token level by the rltap proxy for RL training.

Usage:
    from rltap_openai_agents import OpenAIAgentsAdapter

    agent = OpenAIAgentsAdapter(build_agent, api="chat", reward_fn=exact_match)
    reward = await agent.run(row, base_url=proxy_url, api_key=session_key, http_client=http)
"""

from __future__ import annotations

from rltap_openai_agents._adapter import (
    AgentFactory,
    EpisodeFn,
    OpenAIAgentsAdapter,
    default_input,
)
from rltap_openai_agents._client import (
    ProxyModelProvider,
    proxy_client,
    proxy_model,
    proxy_run_config,
)
from rltap_openai_agents._requirements import FRAMEWORK_REQUIREMENT

__all__ = [
    "FRAMEWORK_REQUIREMENT",
    "AgentFactory",
    "EpisodeFn",
    "OpenAIAgentsAdapter",
    "ProxyModelProvider",
    "default_input",
    "proxy_client",
    "proxy_model",
    "proxy_run_config",
]
