"""bench/learn_frameworks.py's arguments: a plots folder that does not exist yet is made before
any seed trains (it used to fail while saving the plot, after every seed had trained)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _bench() -> object:
    spec = importlib.util.spec_from_file_location(
        "learn_frameworks_bench", REPO_ROOT / "bench" / "learn_frameworks.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_missing_plots_folder_is_made_before_training(tmp_path: Path) -> None:
    plots = tmp_path / "plots" / "learning"
    args = _bench().parse_args(["--plots", str(plots), "--dry-run"])  # type: ignore[attr-defined]
    assert plots.is_dir()
    assert args.plots == str(plots)
