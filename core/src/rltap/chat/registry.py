"""A name -> object registry with decorator and lazy registration, shared by every parser kind.

Parsers are chosen by name on the command line (`--tool-parser hermes`), so each kind of parser
keeps one `Registry`. A lazy entry names `"module:attribute"` and is imported on first `get`, so a
parser with heavy or optional dependencies costs nothing until a session asks for it.

Usage:
    TOOL_PARSERS: Registry[type[ToolParser]] = Registry("tool parser")

    @TOOL_PARSERS.register("hermes", "qwen")
    class HermesToolParser(ToolParser): ...

    TOOL_PARSERS.register_lazy("fancy", "my_package.parsers:FancyToolParser")
    TOOL_PARSERS.get("qwen")  # -> HermesToolParser
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar, cast

__all__ = ["Registry", "UnknownNameError"]

T = TypeVar("T")


class UnknownNameError(LookupError):
    """No entry of that name; the message lists the names that are known."""


class Registry(Generic[T]):
    """Objects of one kind (`kind` names it in error messages) registered by name and aliases."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = {}

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        """Decorator registering the decorated object under `name` and each alias."""

        def decorate(obj: T) -> T:
            for key in (name, *aliases):
                self._claim(key)
                self._entries[key] = obj
            return obj

        return decorate

    def register_lazy(self, name: str, target: str, *aliases: str) -> None:
        """Register `target` (`"package.module:attribute"`), imported on the first `get`."""
        module, sep, attribute = target.partition(":")
        if not sep or not module or not attribute:
            msg = f"lazy {self.kind} target must look like 'module:attribute', got {target!r}"
            raise ValueError(msg)
        for key in (name, *aliases):
            self._claim(key)
            self._lazy[key] = target

    def get(self, name: str) -> T:
        """The object registered as `name`; raises `UnknownNameError` listing the known names."""
        if name in self._entries:
            return self._entries[name]
        target = self._lazy.get(name)
        if target is None:
            known = ", ".join(self.names()) or "none"
            msg = f"unknown {self.kind} {name!r}; known: {known}"
            raise UnknownNameError(msg)
        obj = self._load(target)
        # Every alias of the same target resolves to the one loaded object from now on.
        for key, other in list(self._lazy.items()):
            if other == target:
                del self._lazy[key]
                self._entries[key] = obj
        return obj

    def names(self) -> list[str]:
        """Every registered name and alias, sorted."""
        return sorted({*self._entries, *self._lazy})

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._lazy

    def _claim(self, key: str) -> None:
        if not key:
            msg = f"{self.kind} names must be non-empty"
            raise ValueError(msg)
        if key in self:
            msg = f"{self.kind} {key!r} is already registered"
            raise ValueError(msg)

    def _load(self, target: str) -> T:
        module_name, _, attribute = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            msg = f"cannot import {self.kind} {target!r}: {exc}"
            raise ImportError(msg) from exc
        try:
            obj = getattr(module, attribute)
        except AttributeError as exc:
            msg = f"module {module_name!r} has no {self.kind} {attribute!r}"
            raise ImportError(msg) from exc
        # The registry cannot check a generic T at runtime; the registrant vouches for the type.
        return cast(T, obj)
