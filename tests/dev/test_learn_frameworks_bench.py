"""bench/learn_frameworks.py's arguments and its runs' peak memory: a plots folder that does not
exist yet is made before any seed trains (it used to fail while saving the plot, after every seed
had trained); `--python` names one framework's venv."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

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


def test_python_names_one_frameworks_venv() -> None:
    bench = _bench()
    args = bench.parse_args(["--frameworks", "camel", "--python", "/venv/bin/python"])  # type: ignore[attr-defined]
    assert args.python == "/venv/bin/python"
    with pytest.raises(SystemExit):
        bench.parse_args(["--python", "/venv/bin/python"])  # type: ignore[attr-defined]


def test_a_runs_peak_rss_is_read_until_it_exits() -> None:
    bench = _bench()
    assert bench.peak_rss_kib(os.getpid()) > 0  # type: ignore[attr-defined]
    assert bench.peak_rss_kib(2**22 + 1) is None  # type: ignore[attr-defined]  # no such process
