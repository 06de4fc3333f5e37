"""examples/camel_roleplay's rewards: exact on the tutor's final answer, or shaped (to train);
the trained role play (`ShapedAgent`) is the student's instruction and the tutor's answer, each
role its own policy (train.toml)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from rltap.config.policies import policies_from
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


@pytest.mark.parametrize(
    ("instruction", "answer", "reward"),
    [
        pytest.param("Solve: 7 + 11", "7 + 11 = 18.", 1.0, id="right"),
        pytest.param(
            "Solve: 7 + 11 = 20",
            "Final answer: 20",
            0.2 + 0.3 * 16 / 18 + 0.2,
            id="relayed-then-wrong",
        ),
        pytest.param("Solve: 9 + 11", "Final answer: 20", 0.2 + 0.3 * 16 / 18, id="other-sum"),
        pytest.param("Ann has 7 apples.", "She has 9 apples.", 0.3 * 9 / 18, id="no-sum"),
        pytest.param("Solve: 25 - 7", "Let us count.", 0.2, id="same-value-as-a-difference"),
    ],
)
def test_the_role_play_reward_credits_the_students_relayed_sum_below_a_right_answer(
    example: ModuleType, instruction: str, answer: str, reward: float
) -> None:
    row = {"task": "Ann has 7 apples and buys 11 more.", "answer": "18"}
    exchange = example.Exchange(instruction=instruction, answer=answer)
    assert example.role_play_reward(exchange, row) == pytest.approx(reward)


def test_each_agent_has_its_reward(example: ModuleType) -> None:
    assert example.ShapedAgent().reward_fn is example.role_play_reward
    assert example.Agent().reward_fn is example.final_answer_reward


def test_the_word_problems_split_into_training_and_held_out_rows() -> None:
    def tasks(split: str) -> set[str]:
        lines = (EXAMPLE / f"{split}.jsonl").read_text().splitlines()
        return {json.loads(line)["task"] for line in lines}

    assert (len(tasks("train")), len(tasks("eval"))) == (48, 16)
    assert not tasks("train") & tasks("eval")


def test_the_trained_role_play_is_the_students_instruction_and_the_tutors_answer(
    tmp_path: Path, example: ModuleType
) -> None:
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

    calls = {line["agent_id"]: line for line in load_trajectories(tmp_path / "out")}
    # No task-specify call: the student, who alone is shown the row's task, answers the
    # tutor's opening; the tutor is asked the student's reply and nothing else.
    assert set(calls) == {"Student", "Math Tutor"}
    student, tutor = calls["Student"], calls["Math Tutor"]
    assert row["task"] in str(student["messages"][0]["content"])
    assert str(student["messages"][1]["content"]) == example.OPENING
    assert [m["role"] for m in tutor["messages"]] == ["system", "user"]
    assert row["task"] not in str(tutor["messages"][0]["content"])
    assert str(tutor["messages"][1]["content"]) == student["output_text"]


def test_train_toml_trains_the_student_and_the_tutor_as_two_policies() -> None:
    settings = tomllib.loads((EXAMPLE / "train.toml").read_text())
    policies = policies_from(settings["policies"])
    assert policies is not None
    assert {name: p.agents for name, p in policies.items()} == {
        "student": ("Student",),
        "tutor": ("Math Tutor",),
    }
    assert "agents" not in settings  # refused with policies
