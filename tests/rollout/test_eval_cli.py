"""`rltap eval` as a user runs it (a real process against a real proxy), and its scoring:
episode returns, failed episodes, pass@k against a brute-force count."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_rollout_cli import ROWS, _jsonl, _run, _write_rows

from rltap.rollout.evaluate import pass_at_k, score_rows
from rltap.testing.proxy import RunningProxy


def _brute_force_pass_at_k(outcomes: list[bool], k: int) -> float:
    """The share of the k-subsets of the samples with at least one pass."""
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_is_the_share_of_k_subsets_with_a_pass(n: int) -> None:
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_brute_force_pass_at_k(outcomes, k))


def test_pass_at_k_refuses_impossible_counts() -> None:
    with pytest.raises(ValueError, match="n=2, c=3, k=1"):
        pass_at_k(2, 3, 1)
    with pytest.raises(ValueError, match="k=3"):
        pass_at_k(2, 1, 3)


def test_scores_count_an_episode_by_its_return_and_a_failed_one_as_zero() -> None:
    def line(row: int, episode: int, parent: str | None, reward: float) -> dict[str, object]:
        return {"row": row, "episode": episode, "parent_id": parent, "reward": reward}

    lines = [
        line(0, 0, None, 1.5), line(0, 0, "a", 1.0),  # a return of 1.5: passes
        line(0, 1, None, 0.5),
        line(0, 2, None, 1.0),
        line(1, 0, None, 0.0),  # row 1's episodes 1 and 2 failed: no lines
    ]  # fmt: skip
    result = score_rows(lines, rows=2, samples=3, temperature=0.0, pass_threshold=1.0)
    assert [entry["rewards"] for entry in result.per_row] == [[1.5, 0.5, 1.0], [0.0, 0.0, 0.0]]
    assert [entry["passed"] for entry in result.per_row] == [2, 0]
    assert result.episodes_failed == 2
    assert result.reward_mean == pytest.approx(3.0 / 6)
    assert result.pass_at_k == pytest.approx({"1": (2 / 3) / 2, "2": (1 - 0 / 3) / 2, "3": 1.0 / 2})


@pytest.mark.slow
async def test_eval_prints_the_mean_reward_and_pass_at_k_and_writes_eval_json(
    proxy: RunningProxy, agent_spec: Callable[[str], str], tmp_path: Path
) -> None:
    """The echo script's agent returns its row's reward; row 3's agent raises (0, no pass)."""
    data = _write_rows(tmp_path / "held_out.jsonl", ROWS)
    out = tmp_path / "eval"
    command = [
        "-m", "rltap.cli", "eval", agent_spec("ChatAgent"), "--data", str(data),
        "--out", str(out), "--group-size", "2", "--greedy", "--pass-threshold", "0.5",
        "--proxy", proxy.url, "--admin-key", proxy.admin_key,
    ]  # fmt: skip
    finished = await _run([sys.executable, *command])
    assert finished.returncode == 0, finished.stderr
    assert "rltap eval: chat_agents.py:ChatAgent" in finished.stdout
    assert "pass@2" in finished.stdout
    result = json.loads((out / "eval.json").read_text())
    assert result["rows"] == 4
    assert result["samples"] == 2
    assert result["temperature"] == 0.0
    assert result["episodes_failed"] == 2
    assert [entry["rewards"] for entry in result["per_row"]] == [
        [0.0, 0.0], [0.25, 0.25], [0.5, 0.5], [0.0, 0.0]
    ]  # fmt: skip
    assert result["reward_mean"] == pytest.approx((0.25 + 0.5) * 2 / 8)
    assert result["pass_at_k"] == pytest.approx({"1": 0.25, "2": 0.25})
    assert len(_jsonl(out / "trajectories.jsonl")) == 12  # the rollout's own files
    assert proxy.state.store.open_sessions == 0
