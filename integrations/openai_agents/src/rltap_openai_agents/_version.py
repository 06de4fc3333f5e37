"""The the OpenAI Agents SDK versions this adapter is tested on, declared once."""

from __future__ import annotations

__all__ = ["FRAMEWORK_REQUIREMENT"]

FRAMEWORK_REQUIREMENT = "openai-agents>=0.20,<0.25"
