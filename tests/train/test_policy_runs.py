"""`rltap train` with policies end to end on the tiny model: a writer and a critic, each its
own policy, and a helper no policy names. Each call generates with its agent's adapter and its
tokens carry that policy's version (the helper's stay at the base model's, 0); the run prints
which policy serves which agents, warns after step 1 of an agent no call carried, logs each
policy's metrics, checkpoints every adapter with its AdamW state, and resumes them all; a run
without the policies refuses that folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rltap.cli.commands import main

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "train_toy"
AGENT = f"{HERE / 'two_agents.py'}:Agent"


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def versions_by_agent(run: Path, step: int) -> dict[str, set[int]]:
    """The versions of each agent's generated tokens in step `step`'s rollouts."""
    seen: dict[str, set[int]] = {}
    lines = (run / "rollouts" / f"step-{step}" / "trajectories.jsonl").read_text().splitlines()
    for line in map(json.loads, lines):
        generated = [v for v, m in zip(line["versions"], line["loss_mask"], strict=True) if m]
        seen.setdefault(line["agent_id"], set()).update(generated)
    return seen


@pytest.mark.slow
def test_two_policies_train_their_own_agents_and_resume(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    args = [
        "train", AGENT, "--data", str(EXAMPLE / "data.jsonl"), "--model", str(tiny_model_dir),
        "--out", str(run), "--engine", "transformers", "--rows-per-step", "1",
        "--group-size", "3", "--lr", "1e-2", "--seed", "3",
        "--policy", "writing=writer:4", "--policy", "critique=critic,ghost:2:lr=5e-3",
    ]  # fmt: skip
    assert main([*args, "--steps", "2"]) == 0
    out = " ".join(capsys.readouterr().err.split())  # the run's lines, unwrapped
    assert "writing: agents 'writer' (LoRA rank 4, lr 0.01" in out
    assert "critique: agents 'critic', 'ghost' (LoRA rank 2, lr 0.005" in out
    assert "frozen base model" in out
    assert "'critique' names 'ghost'" in out
    assert "'helper'" in out
    assert out.count("policies name agents no call") == 1  # after step 1 only

    assert versions_by_agent(run, 1) == {"writer": {0}, "critic": {0}, "helper": {0}}
    assert versions_by_agent(run, 2) == {"writer": {1}, "critic": {1}, "helper": {0}}
    lines = metrics(run)
    for name in ("writing", "critique"):
        assert [line[f"{name}/version"] for line in lines] == [1, 2]
        assert all(line[f"{name}/tokens"] == 3 * 6 for line in lines)  # 3 episodes, one call
        assert all(
            f"{name}/{key}" in line for key in ("kl", "entropy", "reward_mean") for line in lines
        )
    assert all(line["tokens"] == 2 * 3 * 6 for line in lines)  # the helper's are not trained

    step = run / "step-2"
    for name, rank in (("writing", 4), ("critique", 2)):
        assert json.loads((step / name / "adapter_config.json").read_text())["r"] == rank
        assert (step / name / "adapter_model.safetensors").is_file()
        assert (step / name / "optimizer").is_dir()
    assert (run / "reward.png").is_file()

    assert main([*args, "--steps", "3"]) == 0  # resumes every adapter at its version
    assert versions_by_agent(run, 3) == {"writer": {2}, "critic": {2}, "helper": {0}}
    assert [line["writing/version"] for line in metrics(run)] == [1, 2, 3]
    plain = [a for a in args if not a.startswith(("--policy", "writing=", "critique="))]
    assert main([*plain, "--lora-rank", "4", "--steps", "4"]) == 1  # not a policies run
    err = "".join(capsys.readouterr().err.split())  # rich wraps long paths anywhere
    assert "step-3wastrainedwithpolicies:resumeitwiththepoliciesithad" in err
