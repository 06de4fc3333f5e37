"""rltap adapter for LangChain: run a chain or a tool agent against the rltap proxy.

Usage:
    from rltap_langchain import LangChainAdapter, final_text

    def build(llm, data):
        return prompt | llm | StrOutputParser()

    def reward(result, data):
        return float(final_text(result) == data["answer"])

    Agent = LangChainAdapter(build, reward_fn=reward)  # what `rltap rollout` runs
"""

from __future__ import annotations

from rltap_langchain._adapter import Build, LangChainAdapter, final_text
from rltap_langchain._requirements import FRAMEWORK_REQUIREMENT, LANGCHAIN_REQUIREMENT

__all__ = [
    "FRAMEWORK_REQUIREMENT",
    "LANGCHAIN_REQUIREMENT",
    "Build",
    "LangChainAdapter",
    "final_text",
]
