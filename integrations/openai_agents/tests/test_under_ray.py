"""examples/openai_agents_calculator on two Ray rollout actors, its agents in each actor's
subprocess workers (`--mode subproc`): the adapter works there unchanged."""

from __future__ import annotations

from pathlib import Path

from rltap.testing.ray_rollout import check_ray_rollout, ray_rollout

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "openai_agents_calculator"


def test_the_calculator_runs_on_two_ray_actors_in_subprocess_mode(tmp_path: Path) -> None:
    run = ray_rollout(
        f"{EXAMPLE / 'agent.py'}:Agent", EXAMPLE / "data.jsonl", tmp_path, "--mode", "subproc"
    )
    check_ray_rollout(run)
