"""A trainer rank that dies mid-run (rltap.train.launcher): the whole `rltap train` stops with an
error naming the rank and quoting its last lines, leaves no process behind, and running it again
resumes from the last checkpoint. The run is a LoRA run on 2 ranks (the adapter is what its
checkpoints and syncs gather)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_testing import descendant_pids, still_running
from safetensors.torch import load_file

from rltap.cli.commands import main
from rltap.train.command import RANK_LOGS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_toy"
# What rank 1 logs as it starts training on the packs of version 1: step 2's update.
STEP_2 = re.compile(r"^rank 1: step \d+ packs 1$", re.MULTILINE)
WAIT_SECONDS = 300.0


def _rank_log(run: Path, rank: int) -> str:
    return "".join(p.read_text() for p in (run / RANK_LOGS).glob(f"*/attempt_0/{rank}/stderr.log"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_rank_killed_during_a_step_stops_the_run_and_it_resumes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    args = [
        "train", f"{EXAMPLE / 'agent.py'}:Agent", "--data", str(EXAMPLE / "data.jsonl"),
        "--model", str(tiny_model_dir), "--out", str(run), "--engine", "transformers",
        "--rows-per-step", "1", "--group-size", "2", "--lr", "1e-3", "--lora-rank", "4",
        "--nproc-per-node", "2", "--steps", "3",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = subprocess.Popen(
        [sys.executable, "-m", "rltap.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not STEP_2.search(_rank_log(run, 1)):
            assert command.poll() is None, command.communicate()
            assert time.monotonic() < deadline, "step 2 never started"
            time.sleep(0.05)
        pids = descendant_pids(command.pid)
        found = re.search(r"^rank 1 \(pid (\d+)\) follows rank 0$", _rank_log(run, 1), re.M)
        assert found
        rank_1 = int(found.group(1))
        assert rank_1 in pids
        os.kill(rank_1, signal.SIGKILL)
        _, err = command.communicate(timeout=WAIT_SECONDS)
    finally:
        if command.poll() is None:
            command.kill()
    assert command.returncode == 1
    assert "trainer rank failed: rank 1: Signal 9 (SIGKILL)" in err
    assert "rank 1: step" in err  # its last lines, quoted
    assert still_running(pids) == []  # no rank, launcher or engine outlives the command
    assert (run / "step-1" / "adapter_config.json").is_file()
    assert not (run / "step-2").exists()

    assert main(args) == 0  # again: resumes after step 1, on 2 ranks
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert [line["version"] for line in lines] == [1.0, 2.0, 3.0]
    batch = load_file(str(run / "rollouts" / "step-2" / "batch.safetensors"))
    assert {int(v) for v in batch["versions"][batch["loss_mask"].bool()]} == {1}
