"""rltap adapter for CAMEL-AI: every LLM call of a ChatAgent or RolePlaying society, recorded at
the token level by the rltap proxy.

Usage:
    from camel.agents import ChatAgent
    from rltap_camel import CamelAdapter

    def solve(data, model):  # model: a ProxyModel on this episode's proxy session
        agent = ChatAgent("You are a calculator.", model=model, tools=[add])
        return agent.step(data["question"]).msgs[0].content

    def exact_match(answer, data):
        return float(data["answer"] in answer)

    agent = CamelAdapter(solve, reward_fn=exact_match)  # agent.run(data, base_url=..., ...)
"""

from __future__ import annotations

from rltap_camel._adapter import CamelAdapter, EpisodeFn
from rltap_camel._agents import name_agents
from rltap_camel._client import DEFAULT_CONTEXT_WINDOW, ProxyModel
from rltap_camel._requirements import FRAMEWORK_REQUIREMENT
from rltap_camel._tokens import ByteTokenCounter, TokenizerTokenCounter

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "FRAMEWORK_REQUIREMENT",
    "ByteTokenCounter",
    "CamelAdapter",
    "EpisodeFn",
    "ProxyModel",
    "TokenizerTokenCounter",
    "name_agents",
]
