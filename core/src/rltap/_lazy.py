"""Package attributes imported on first use (PEP 562), so a light import stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(
    package: str, namespace: dict[str, Any], sources: Mapping[str, str]
) -> Callable[[str], Any]:
    """A module `__getattr__` importing `name` from `sources[name]` once, then caching it."""

    def __getattr__(name: str) -> Any:
        module = sources.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
