"""The CAMEL-AI versions this adapter is tested on, declared once.

pyproject.toml repeats the range for installers; the adapter checks this one at construction.
"""

from __future__ import annotations

__all__ = ["FRAMEWORK_REQUIREMENT"]

FRAMEWORK_REQUIREMENT = "camel-ai>=0.2.79,<0.3"
