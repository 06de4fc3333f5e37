"""bench/gpu_weight_transfer.sh, the GPU bench of vLLM's weight transfer, exits clearly where it
cannot run: status 77 ("skipped", as autotools and meson read it) and one line saying why, with
no GPU visible (here, or hidden by CUDA_VISIBLE_DEVICES on a GPU machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_script_without_a_gpu_exits_77_with_one_line() -> None:
    done = _run("bash", "bench/gpu_weight_transfer.sh")
    assert done.returncode == 77
    assert done.stderr.strip().splitlines() == [
        "bench/gpu_weight_transfer.sh: skipped, no NVIDIA GPU visible here; it needs one CUDA GPU"
    ]
    assert done.stdout == ""


@pytest.mark.slow  # imports torch and transformers in a process of its own
def test_the_python_bench_checks_the_gpu_itself_before_building_anything(tmp_path: Path) -> None:
    done = _run(sys.executable, "bench/gpu_weight_transfer.py", "--out", str(tmp_path / "out"))
    assert done.returncode == 77
    assert "skipped, torch sees no CUDA GPU" in done.stderr
    assert not (tmp_path / "out").exists()
