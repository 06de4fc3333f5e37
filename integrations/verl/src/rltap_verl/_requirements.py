"""The verl versions this plugin is written and tested against, declared once.

pyproject.toml repeats the range; `RltapAgentLoop` checks the installed verl against it when it is
built (`rltap.adapter.check_framework`), so another verl fails with a message naming both.
"""

from __future__ import annotations

__all__ = ["VERL_REQUIREMENT"]

VERL_REQUIREMENT = "verl>=0.9.1,<0.10"
