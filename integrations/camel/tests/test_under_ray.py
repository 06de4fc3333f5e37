"""examples/camel_roleplay on two Ray rollout actors, inline in each actor's event loop: the
adapter works there unchanged."""

from __future__ import annotations

from pathlib import Path

from rltap.testing.ray_rollout import check_ray_rollout, ray_rollout

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "camel_roleplay"


def test_the_role_play_runs_on_two_ray_actors_inline(tmp_path: Path) -> None:
    run = ray_rollout(f"{EXAMPLE / 'agent.py'}:Agent", EXAMPLE / "data.jsonl", tmp_path)
    check_ray_rollout(run)
    # More than one of CAMEL's agents (task specifier, student, tutor) called the policy.
    assert len({line["agent_id"] for line in run.lines}) >= 2, run.lines
