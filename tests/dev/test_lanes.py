"""`make integrations`' runner: every session of a noxfile, two at a time, each one's output
printed whole, a table at the end, a failing session failing the run, and nothing it started
left running when it is stopped. A real nox runs noxfiles of small sessions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real nox processes, seconds each

TALKING = """
import nox

nox.options.default_venv_backend = "none"
SAY = "import sys, time; print(sys.argv[1]); sys.stdout.flush(); time.sleep(0.3)"
MARK = "import pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text(str(time.time()))"


@nox.session
@nox.parametrize("name", ["a", "b", "c"])
def talk(session, name):
    session.run("python", "-c", MARK, f"{name}.start")
    for line in range(3):
        session.run("python", "-c", SAY, f"{name}-{line}")
    session.run("python", "-c", MARK, f"{name}.end")


@nox.session
def fails(session):
    session.run("python", "-c", "raise SystemExit(3)")
"""

SLEEPING = """
import nox

nox.options.default_venv_backend = "none"
SLEEP = "import os, time; open('sleeper.pid', 'w').write(str(os.getpid())); time.sleep(600)"


@nox.session
def sleeps(session):
    session.run("python", "-c", SLEEP)
"""


def start(tmp_path: Path, noxfile: str) -> subprocess.Popen[str]:
    (tmp_path / "noxfile.py").write_text(noxfile)
    nox = f"{sys.executable} -m nox --noxfile {tmp_path / 'noxfile.py'}"
    return subprocess.Popen(
        [sys.executable, "-m", "rltap_dev.lanes", "--jobs", "2", "--nox", nox],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_sessions_run_two_at_a_time_each_printed_whole_and_a_failure_fails_the_run(
    tmp_path: Path,
) -> None:
    run = start(tmp_path, TALKING)
    output, _ = run.communicate(timeout=180)
    assert run.returncode == 1, output
    for name in "abc":
        lines = [line for line in output.splitlines() if line.startswith(f"{name}-")]
        assert lines == [f"{name}-0", f"{name}-1", f"{name}-2"], output
        part = output[output.index(f"{name}-0") : output.index(f"{name}-2")]
        assert not any(f"{other}-0" in part for other in "abc" if other != name), output
    spans = {
        name: (
            float((tmp_path / f"{name}.start").read_text()),
            float((tmp_path / f"{name}.end").read_text()),
        )
        for name in "abc"
    }
    # a and b start together (two lanes); c waits for a lane
    assert spans["a"][0] < spans["b"][1]
    assert spans["b"][0] < spans["a"][1]
    assert spans["c"][0] >= min(spans["a"][1], spans["b"][1])
    table = output[output.index("nox sessions") :].replace(" ", "")
    for session in ("talk(name='a')", "talk(name='b')", "talk(name='c')"):
        assert f"│{session}│ok│" in table
    assert "│fails│failed(1)│" in table
    assert (tmp_path / ".nox-logs" / "fails.log").is_file()


def test_stopping_the_runner_kills_the_sessions_it_started(tmp_path: Path) -> None:
    run = start(tmp_path, SLEEPING)
    pid_file = tmp_path / "sleeper.pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_file.exists()
    sleeper = int(pid_file.read_text())
    run.send_signal(signal.SIGTERM)
    run.communicate(timeout=60)
    assert run.returncode != 0
    deadline = time.monotonic() + 10
    while _alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(sleeper)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie no one reaped yet is gone too
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()
