"""examples/camel_roleplay's rewards: exact on the tutor's final answer, or shaped (to train);
the trained role play (`ShapedAgent`) asks the tutor the row's task as it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rltap.rollout.files import load_trajectories
from rltap.rollout.workflow import load_object
from rltap.testing import cached_tiny_model_dir

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "camel_roleplay"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    # The module rltap loads the agent from (loaded once: the same module as the rollout's).
    return sys.modules[load_object(f"{EXAMPLE / 'agent.py'}:Agent").__module__]


@pytest.mark.parametrize(
    ("answer", "exact", "shaped"),
    [
        pytest.param("7 + 11 = 18. Final answer: 18", 1.0, 1.0, id="right"),
        pytest.param("She has 18 apples.", 1.0, 1.0, id="right-unmarked"),
        pytest.param("Final answer: 17 apples", 0.0, 0.2 + 0.3 * 17 / 18, id="near-marked"),
        pytest.param("She has 9 apples.", 0.0, 0.3 * 9 / 18, id="farther-unmarked"),
        pytest.param("Final answer: 40", 0.0, 0.2, id="off-by-more-than-the-answer"),
        pytest.param("Let us count them together.", 0.0, 0.0, id="no-answer"),
    ],
)
def test_the_shaped_reward_credits_format_and_nearness_below_a_right_answer(
    example: ModuleType, answer: str, exact: float, shaped: float
) -> None:
    row = {"task": "Ann has 7 apples and buys 11 more.", "answer": "18"}
    assert example.final_answer_reward(answer, row) == exact
    assert example.shaped_reward(answer, row) == pytest.approx(shaped)


def test_shaped_agent_is_the_role_play_with_the_shaped_reward(example: ModuleType) -> None:
    assert example.ShapedAgent().reward_fn is example.shaped_reward
    assert example.Agent().reward_fn is example.final_answer_reward


def test_the_word_problems_split_into_training_and_held_out_rows() -> None:
    def tasks(split: str) -> set[str]:
        lines = (EXAMPLE / f"{split}.jsonl").read_text().splitlines()
        return {json.loads(line)["task"] for line in lines}

    assert (len(tasks("train")), len(tasks("eval"))) == (48, 16)
    assert not tasks("train") & tasks("eval")


def test_the_trained_role_play_asks_the_tutor_the_rows_own_task(tmp_path: Path) -> None:
    row = json.loads((EXAMPLE / "eval.jsonl").read_text().splitlines()[0])
    data = tmp_path / "row.jsonl"
    data.write_text(json.dumps(row) + "\n")
    command = [
        sys.executable, "-m", "rltap.cli", "rollout", f"{EXAMPLE / 'agent.py'}:ShapedAgent",
        "--data", str(data), "--out", str(tmp_path / "out"), "--group-size", "1",
        "--engine", "scripted", "--script", "rltap.testing.scripts:tool_loop",
        "--model", str(cached_tiny_model_dir()), "--default-max-tokens", "16",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-4000:]

    lines = load_trajectories(tmp_path / "out")
    # No task-specify call, no student call: the tutor, asked the row's task word for word, in
    # its role-play prompt and as the student's instruction; its tool round and final answer.
    assert {line["agent_id"] for line in lines} == {"Math Tutor"}
    first = min(lines, key=lambda line: len(line["messages"]))
    system, question = first["messages"][0], first["messages"][1]
    assert (system["role"], question["role"]) == ("system", "user")
    assert row["task"] in str(system["content"])
    assert str(question["content"]) == f"Instruction: {row['task']}\nInput: None"
    assert any("calculate" in str(line["output_message_list"]) for line in lines)
