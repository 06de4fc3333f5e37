"""What a user names as an agent or workflow, loaded: `pkg.module:Name`, `pkg.module.Name` or
`path/to/file.py:Name` (`resolve_workflow` and `rltap rollout` take these)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

__all__ = ["WorkflowError", "load_object"]


class WorkflowError(TypeError):
    """A workflow or agent that cannot be used as given; the message names the fix."""


def load_object(spec: str) -> Any:
    """What `pkg.module:Name`, `pkg.module.Name` or `path/to/file.py:Name` names (a file is
    loaded once, under a name of its own: what `resolve_workflow` and the tests use)."""
    if ":" in spec:
        module_name, _, attribute = spec.rpartition(":")
    else:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        msg = f"{spec!r} is not 'pkg.module:Name', 'pkg.module.Name' or 'file.py:Name'"
        raise WorkflowError(msg)
    if module_name.endswith(".py"):
        module = _load_file(Path(module_name))
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            msg = f"cannot import {module_name!r} for {spec!r}: {exc}"
            raise WorkflowError(msg) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        msg = f"module {module_name!r} has no attribute {attribute!r}"
        raise WorkflowError(msg) from None


def _load_file(path: Path) -> Any:
    if not path.is_file():
        msg = f"no such file {path}"
        raise WorkflowError(msg)
    name = f"rltap_agent_{path.stem}_{abs(hash(path.resolve()))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        msg = f"cannot load {path} as a module"
        raise WorkflowError(msg)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pickle finds the agent's class by this name (subproc mode)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # else the next attempt would get the half-run module
        raise
    return module
