"""Which of rltap's optional dependencies a module's import pulls in through rltap's own code.

`optional_imports(module)` imports `module` in a fresh interpreter and reports each optional
module (`rltap._lazy.OPTIONAL_MODULES`: the server and ML stacks, the extras) that an `rltap`
module (or a `rltap_*` adapter's) imported on the way, as `"torch <- rltap.engines.transformers"`.
What a framework itself imports does not count: the slim install has to carry the framework,
not what rltap's extras add. Empty means the module imports on the slim install.
"""

from __future__ import annotations

import json
import subprocess
import sys

from rltap._lazy import OPTIONAL_MODULES

__all__ = ["SLIM_SURFACE", "optional_imports"]

# What a framework adapter, a workflow and the proxy's client import from rltap: the modules the
# slim install (`pip install rltap`, no extras) must import.
SLIM_SURFACE = (
    "rltap",
    "rltap.adapter",
    "rltap.tree.links",
    "rltap.client.proxy",
    "rltap.rollout.workflow",
)

# Runs in the child: a finder that looks at each first import of an optional top-level module
# and records the module whose code asked for it (the first frame outside the import system).
_PROBE = """
import importlib, json, sys
OPTIONAL = set(json.loads(sys.argv[1]))
found = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in OPTIONAL and name == top and name not in sys.modules:
            frame = sys._getframe(1)
            while frame is not None and frame.f_globals.get("__name__", "").startswith(
                ("importlib", "_frozen_importlib")
            ):
                frame = frame.f_back
            importer = "?" if frame is None else frame.f_globals.get("__name__", "?")
            if importer.split(".")[0] == "rltap" or importer.startswith("rltap_"):
                found.append(f"{name} <- {importer}")
        return None

sys.meta_path.insert(0, Watch())
importlib.import_module(sys.argv[2])
print(json.dumps(found))
"""


def optional_imports(module: str) -> list[str]:
    """The optional modules rltap's code imports when `module` is imported (module docstring)."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(sorted(OPTIONAL_MODULES)), module],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        msg = f"importing {module} failed: {result.stderr.strip()}"
        raise ImportError(msg)
    found: list[str] = json.loads(result.stdout.splitlines()[-1])
    return found
