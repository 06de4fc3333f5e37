"""The import paths of modules that moved in the renovation of 0.2, kept for one release.

`import rltap.workflow` (or any module below a moved package, `rltap.distributed.actor`) still
works: it warns with a `DeprecationWarning` naming the new path and binds the new module under
the old name, the same object, as vLLM aliases its moved modules. The paths that became packages
(`rltap.client`, `rltap.rollout`, `rltap.session`, `rltap.cli`) re-export the old module's names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "install", "new_path"]

MOVED = {
    "rltap.generation": "rltap.record.generation",
    "rltap.cache": "rltap.tree.cache",
    "rltap.canonical": "rltap.tree.canonical",
    "rltap.carry": "rltap.tree.carry",
    "rltap.links": "rltap.tree.links",
    "rltap.rewards": "rltap.tree.rewards",
    "rltap.export": "rltap.tree.export",
    "rltap.sse": "rltap.protocols.sse",
    "rltap.exchange": "rltap.session.exchange",
    "rltap.engine_request": "rltap.session.engine_request",
    "rltap.interleave": "rltap.session.interleave",
    "rltap.json_body": "rltap.session.json_body",
    "rltap.proxy.client": "rltap.client.proxy",
    "rltap.workflow": "rltap.rollout.workflow",
    "rltap.rollout_io": "rltap.rollout.files",
    "rltap.serving": "rltap.rollout.serving",
    "rltap.evaluate": "rltap.rollout.evaluate",
    "rltap.subproc": "rltap.rollout.subproc",
    "rltap.progress": "rltap.rollout.progress",
    "rltap.distributed": "rltap.rollout.ray",
}


def new_path(name: str) -> str | None:
    """Where the module once imported as `name` lives now (None: it did not move)."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self._own_spec: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if new_path(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_path(spec.name)
        assert new is not None
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (the old path goes in 0.3)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._own_spec[new] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The new module ran when `create_module` imported it; the import system has since set
        # its `__spec__` to the old name's, which would mislead pickling and reloads.
        module.__spec__ = self._own_spec[module.__name__]


def install() -> None:
    """Answer the old paths (once per process)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
