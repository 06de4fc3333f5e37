"""The renovation's moves: the old import paths work for one release, with a warning naming the
new one, and `rltap` keeps few names at its top."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

import rltap
from rltap._moved import MOVED

OLD_SUBMODULES = {
    "rltap.distributed.actor": "rltap.rollout.ray.actor",
    "rltap.distributed.cluster": "rltap.rollout.ray.cluster",
    "rltap.distributed.pool": "rltap.rollout.ray.pool",
    "rltap.distributed.runs": "rltap.rollout.ray.runs",
    "rltap.distributed.weights": "rltap.rollout.ray.weights",
}


@pytest.mark.parametrize(("old", "new"), sorted({**MOVED, **OLD_SUBMODULES}.items()))
def test_an_old_path_imports_the_moved_module_and_names_its_new_path(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new};"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__ is not None
    assert module.__spec__.name == new


def test_an_unknown_module_is_still_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("rltap.no_such_module")


@pytest.mark.parametrize(
    ("package", "names"),
    [
        pytest.param("rltap.rollout", ["run_rollout", "load_trajectories", "BATCH"], id="rollout"),
        pytest.param("rltap.session", ["Session"], id="session"),
        pytest.param("rltap.client", ["DirectOpenAI", "DirectTransport"], id="client"),
        pytest.param("rltap.cli", ["main", "build_parser", "COMMANDS"], id="cli"),
    ],
)
def test_a_module_that_became_a_package_still_gives_its_names(
    package: str, names: list[str]
) -> None:
    module = importlib.import_module(package)
    for name in names:
        assert getattr(module, name) is not None


def test_rltap_has_at_most_twenty_names_at_its_top() -> None:
    names = sorted(
        p.name
        for p in Path(rltap.__path__[0]).iterdir()
        if p.name != "__pycache__" and (p.suffix == ".py" or (p / "__init__.py").exists())
    )
    assert len(names) <= 20, names
