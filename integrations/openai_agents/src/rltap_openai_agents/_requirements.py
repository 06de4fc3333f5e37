"""The OpenAI Agents SDK versions this adapter is tested on, declared once.

pyproject.toml repeats the range for installers; the adapter checks this one at construction.
"""

from __future__ import annotations

__all__ = ["FRAMEWORK_REQUIREMENT"]

FRAMEWORK_REQUIREMENT = "openai-agents>=0.19,<0.25"
