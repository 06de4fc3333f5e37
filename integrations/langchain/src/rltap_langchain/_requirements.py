"""The LangChain versions this adapter is tested on, declared once.

`FRAMEWORK_REQUIREMENT` names the package that carries the wire client (`ChatOpenAI`);
`LANGCHAIN_REQUIREMENT` the one that carries `create_agent`. pyproject.toml repeats both ranges.
"""

from __future__ import annotations

__all__ = ["FRAMEWORK_REQUIREMENT", "LANGCHAIN_REQUIREMENT"]

FRAMEWORK_REQUIREMENT = "langchain-openai>=1.0,<2"
LANGCHAIN_REQUIREMENT = "langchain>=1.0,<2"
