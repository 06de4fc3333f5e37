"""The LangChain versions this adapter is tested on, declared once."""

from __future__ import annotations

__all__ = ["FRAMEWORK_REQUIREMENT"]

FRAMEWORK_REQUIREMENT = "langchain-openai>=1.0,<2"
