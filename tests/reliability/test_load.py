"""Load: 500 concurrent sessions x 4 turns through one proxy process, measured.

`bench/soak.py load` starts the proxy in its own process (rltap's app, the instant engine, uvicorn
as `rltap serve` runs it), runs a warm-up round, then 500 concurrent sessions of 4 turns each
(Chat Completions, Responses and Messages in rotation; half the chat sessions streamed), each
granted, started, rewarded, ended, exported and exported again (404), and reads the proxy's
memory from /proc. Here its report must show no error, every interaction exported exactly once and
the memory after all exports within 10% of where it was after the warm-up.

`make soak` runs the 10,000-session soak of the same script.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from reliability_support import ROOT, SOAK_SCRIPT

SESSIONS = 500
TURNS = 4


@pytest.mark.slow
def test_500_concurrent_sessions_lose_nothing_and_leak_nothing(tmp_path: Path) -> None:
    report_file = tmp_path / "load.json"
    command = [
        sys.executable, str(SOAK_SCRIPT), "load",
        "--sessions", str(SESSIONS), "--turns", str(TURNS), "--json", str(report_file),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    print(done.stdout)  # the figures: calls/s, CPU per request, memory start/peak/end
    assert report_file.exists(), done.stderr[-3000:]
    report = json.loads(report_file.read_text())

    assert report["errors"] == 0, report["first_errors"]
    assert report["calls"] == SESSIONS * TURNS
    # Each session's export held exactly the ids it was answered with, chained, and a second
    # export of it was 404: every interaction exported exactly once.
    assert report["interactions_exported"] == SESSIONS * TURNS
    assert report["rss_growth"] <= 0.10, report
    assert report["rss_peak_mb"] >= report["rss_end_mb"] > 0
    assert done.returncode == 0, done.stderr[-3000:]
