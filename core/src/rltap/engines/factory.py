"""Build an engine by name, the way `rltap serve --engine ...` does.

The names, the classes and where each runs are `rltap.config.engines.ENGINES`. A class is given
the engine settings (`EngineConfig`'s fields) its constructor names (`model`, `url`, `script`,
...); one of those without a default is required, and a `ConfigError` naming its flag when it
is not set. A server engine given several comma-separated `url`s is one engine per address
behind an `EngineRouter` (`rltap.engines.router`); one address is the plain engine. Each
engine's module is imported only when that engine is built. The server engines (vLLM, SGLang)
need nothing beyond `pip install rltap`; the embedded ones (transformers, scripted) run the
model in-process and need torch, which the `rltap[embedded]` extra installs: without it,
building one fails with an ImportError that says so.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import Any

from rltap._lazy import require_module
from rltap.config.engines import ENGINE_KINDS, ENGINES, SERVER_ENGINES, EngineEntry
from rltap.config.flags import ConfigError, settings
from rltap.config.serve import EngineConfig, EngineKind
from rltap.engines.base import InferenceEngine
from rltap.engines.router import EngineRouter

__all__ = [
    "EMBEDDED_EXTRA",
    "ENGINE_KINDS",
    "SERVER_ENGINES",
    "EngineKind",
    "create_engine",
    "engine_class",
    "require_embedded",
    "split_urls",
]

EMBEDDED_EXTRA = "rltap[embedded]"


def require_embedded(what: str) -> None:
    """Raise an ImportError naming the extra to install when torch, which `what` needs, is not
    importable."""
    require_module("torch", EMBEDDED_EXTRA, what)


def create_engine(kind: EngineKind | EngineConfig, **settings: Any) -> InferenceEngine:
    """The engine the settings name: an `EngineConfig` (`settings` change its fields), or an
    engine's name and the other fields as keywords (`create_engine("vllm", url="http://h:8000")`).
    """
    if isinstance(kind, EngineConfig):
        config = dataclasses.replace(kind, **settings)
    else:
        config = EngineConfig(engine=kind, **settings)
    name = config.engine
    entry = ENGINES.get(name)
    if entry is None:
        msg = f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}"
        raise ConfigError(msg)
    if not entry.server:
        require_embedded(f"the {name} engine")
    cls = engine_class(entry)
    arguments = _arguments(name, cls, config)
    urls = split_urls(config.url) if entry.server else []
    if entry.server and not urls:
        msg = f"the {name} engine needs --url: no address in {config.url!r}"
        raise ConfigError(msg)
    if len(urls) > 1:
        engines = [cls(**{**arguments, "url": url}) for url in urls]
        if len({engine.url for engine in engines}) < len(engines):  # as each engine reads it
            msg = f"--url names a server twice: {config.url}"
            raise ConfigError(msg)
        return EngineRouter(engines)
    if urls:
        arguments["url"] = urls[0]
    engine: InferenceEngine = cls(**arguments)
    return engine


def split_urls(url: str | None) -> list[str]:
    """The addresses of a `--url` value: comma-separated, blanks dropped."""
    return [part.strip() for part in (url or "").split(",") if part.strip()]


def engine_class(entry: EngineEntry) -> type[Any]:
    """The class `entry` names, imported now."""
    cls: type[Any] = getattr(importlib.import_module(entry.module), entry.class_name)
    return cls


def _arguments(name: str, cls: type[Any], config: EngineConfig) -> dict[str, Any]:
    """The settings `cls`'s constructor names; a `ConfigError` for a required one not set."""
    parameters = inspect.signature(cls).parameters
    arguments = {}
    for setting in settings(EngineConfig):
        parameter = parameters.get(setting.dest)
        if parameter is None:
            continue
        value = getattr(config, setting.dest)
        if parameter.default is inspect.Parameter.empty and value in (None, ""):
            msg = f"the {name} engine needs {setting.flag}: {setting.kwargs['help']}"
            raise ConfigError(msg)
        arguments[setting.dest] = value
    return arguments
