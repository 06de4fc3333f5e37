"""rltap adapter (skeleton: the supported framework range is declared; the adapter comes next)."""

from __future__ import annotations

from rltap_langchain._version import FRAMEWORK_REQUIREMENT

__all__ = ["FRAMEWORK_REQUIREMENT"]
