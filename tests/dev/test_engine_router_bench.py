"""bench/engine_router.py runs end to end in its CI size (`--quick`): fake engines and proxies
as processes of their own, and it prints its table with each figure beside its goal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_quick_router_bench_prints_its_figures_beside_the_goals() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "engine_router.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for row in ("(a) 1 engine", "(a) 2 engines", "(b) router's added latency", "(c) spread"):
        assert row in done.stdout
    for goal in (">= 1.8x", "<= +0.1 ms", "<= 10%"):
        assert goal in done.stdout
    assert "calls/s" in done.stdout
