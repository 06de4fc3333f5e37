"""A framework's example agent under `rltap rollout --ray`: what each integration's tests run to
check that its adapter works unchanged on Ray rollout actors.

`ray_rollout` runs `rltap rollout AGENT --ray=local --replicas 2 --actor-cpus 1` on the tiny
model (embedded engine, a few tokens a reply) as a subprocess of this interpreter, so of the
integration's own venv (which needs `rltap[ray]`), and returns what the run left: its exit
status, output, summary, trajectory lines, and the sessions each actor's capture store holds (one
store per actor, `capture-actor<i>.sqlite`), which tell which actor ran which episode.
`check_ray_rollout` asserts what every framework's run must show (so that fact is in one place);
nothing framework-specific is asserted here.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rltap.rollout.files import SUMMARY, load_trajectories
from rltap.rollout.ray.cluster import actor_store
from rltap.store.read import StoreReader
from rltap.store.schema import STORE_FILE
from rltap.testing.models import cached_tiny_model_dir

__all__ = ["RayRollout", "check_ray_rollout", "ray_rollout"]

ROWS = 2
GROUP_SIZE = 1
REPLICAS = 2
MAX_TOKENS = 16


@dataclass(frozen=True, slots=True)
class RayRollout:
    """What one `rltap rollout --ray` run left."""

    returncode: int
    output: str  # stdout and stderr, for the assertion messages
    summary: dict[str, Any]  # summary.json; empty when the run wrote none
    lines: list[dict[str, Any]]  # trajectories.jsonl
    actor_sessions: list[set[str]]  # the session ids in each actor's store, actor 0 first


def _actor_sessions(out: Path) -> list[set[str]]:
    sessions: list[set[str]] = []
    for index in range(REPLICAS):
        path = actor_store(out / STORE_FILE, index)
        if not path.is_file():
            sessions.append(set())
            continue
        with contextlib.closing(StoreReader(path)) as reader:
            sessions.append({summary.session_id for summary in reader.summaries()})
    return sessions


def ray_rollout(
    agent: str, data: Path, out: Path, *options: str, timeout: float = 300.0
) -> RayRollout:
    """Run `agent` (path/agent.py:Name) on the first `ROWS` rows of `data` on `REPLICAS`
    actors of a new local Ray cluster, writing to `out`; `options` go on the command line
    (e.g. `--mode subproc`)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [line for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    head = out / "data.jsonl"
    head.write_text("".join(line + "\n" for line in rows[:ROWS]), encoding="utf-8")
    command = [
        sys.executable, "-m", "rltap.cli", "rollout", agent, "--data", str(head),
        "--out", str(out), "--group-size", str(GROUP_SIZE),
        "--model", str(cached_tiny_model_dir()), "--default-max-tokens", str(MAX_TOKENS),
        "--store", str(out / STORE_FILE),
        # "local": a cluster of this run's own, never one another job started on this machine.
        "--ray=local", "--replicas", str(REPLICAS), "--actor-cpus", "1", *options,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    summary_path = out / SUMMARY
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    return RayRollout(
        returncode=result.returncode,
        output=f"{result.stdout}\n{result.stderr[-6000:]}",
        summary=summary,
        lines=load_trajectories(out),
        actor_sessions=_actor_sessions(out),
    )


def check_ray_rollout(run: RayRollout) -> None:
    """Every episode ran and was recorded with its tokens, and both actors ran episodes: the
    sessions of the lines are those of the actors' stores, each in one store only."""
    assert run.returncode == 0, run.output
    assert run.summary["episodes_ok"] == ROWS * GROUP_SIZE, run.summary
    assert run.summary["episodes_failed"] == 0, run.summary
    assert run.summary["interactions"] == len(run.lines) > 0, run.summary
    for line in run.lines:  # the prompt's and the reply's token ids, the reply's logprobs
        assert len(line["input_ids"]) == len(line["loss_mask"]) == len(line["logprobs"]), line
        assert any(line["loss_mask"]), line
    assert {(line["row"], line["episode"]) for line in run.lines} == {
        (row, episode) for row in range(ROWS) for episode in range(GROUP_SIZE)
    }
    sessions = {line["session"] for line in run.lines}
    assert len(sessions) == ROWS * GROUP_SIZE
    first, second = run.actor_sessions
    assert first, run.actor_sessions  # each actor ran an episode
    assert second, run.actor_sessions
    assert not first & second
    assert first | second == sessions
