"""examples/openai_agents_calculator runs as its README says, and pickles for subprocess mode."""

from __future__ import annotations

import ast
import json
import pickle
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rltap.rollout.workflow import OpenAIProxyWorkflow, load_object, resolve_workflow
from rltap.testing import RunningProxy

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "openai_agents_calculator"


def rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in (EXAMPLE / "data.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("Agent", [1.0, 0.0], id="chat"),
        pytest.param("ResponsesAgent", [1.0, 0.0], id="ResponsesAgent"),
        # ShapedAgent: the 7 * 6 row's wrong answer (5, 37 off 42) still earns the format
        # credit and a little for its nearness.
        pytest.param("ShapedAgent", [1.0, 0.2 + 0.3 * 5 / 42], id="ShapedAgent"),
    ],
)
async def test_calculator_rewards_exact_answers(
    proxy: RunningProxy, name: str, expected: list[float]
) -> None:
    workflow = resolve_workflow(
        f"{EXAMPLE / 'agent.py'}:{name}", proxy_addr=proxy.url, admin_key=proxy.admin_key
    )
    assert isinstance(workflow, OpenAIProxyWorkflow)
    workflow.agent = pickle.loads(pickle.dumps(workflow.agent))
    try:
        # The script's calculator call is 2+3: rows answering 5 earn 1.0, the others 0.0.
        episodes = [await workflow.run_episode(row) for row in rows()[1:3]]
    finally:
        await workflow.aclose()
    rewards = []
    for episode in episodes:
        assert episode.interactions is not None, episode.error
        first, second = episode.interactions.values()
        assert second.parent is first
        rewards.append(second.reward)
    assert rewards == pytest.approx(expected, abs=1e-7)  # stored as float32


def test_data_rows_have_a_question_and_an_answer() -> None:
    assert 4 <= len(rows()) <= 8
    assert all(set(row) == {"question", "answer"} for row in rows())


@pytest.fixture(scope="module")
def example() -> ModuleType:
    # The module rltap loads the agent from (loaded once: the same module as the rollout's).
    return sys.modules[load_object(f"{EXAMPLE / 'agent.py'}:Agent").__module__]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("Final answer: 42", "42", id="plain"),
        pytest.param("6 * 7 = 42.\nFinal answer: 42.", "42", id="trailing-period"),
        pytest.param("final answer: 1\nFinal Answer:  5 ", "5", id="last-wins"),
        pytest.param("Final answer: 5\nHope that helps", "5", id="first-line"),
        pytest.param("42", "42", id="no-marker"),
    ],
)
def test_final_answer_is_what_follows_the_marker(
    example: ModuleType, text: str, expected: str
) -> None:
    assert example.final_answer(text) == expected


class _Result:
    def __init__(self, final_output: str) -> None:
        self.final_output = final_output


@pytest.mark.parametrize(
    ("text", "exact"),
    [
        pytest.param("Final answer: 42", 1.0, id="marked"),
        pytest.param("6 * 7 = 42.", 1.0, id="an-equation-ending-on-it"),
        pytest.param("Final answer: 42.0", 1.0, id="the-same-number"),
        pytest.param("42 is not it.\nFinal answer: 41", 0.0, id="the-marked-one-counts"),
        pytest.param("6 * 7 = 42 or 43", 0.0, id="the-last-number-counts"),
        pytest.param("forty-two", 0.0, id="no-number"),
    ],
)
def test_exact_match_reads_the_final_answers_number(
    example: ModuleType, text: str, exact: float
) -> None:
    assert example.exact_match(_Result(text), {"answer": "42"}) == exact


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param("12 * (3 + 4)", "84", id="integer"),
        pytest.param("7 / 2", "3.5", id="fraction"),
        pytest.param("-2 ** 3", "-8", id="unary-power"),
    ],
)
def test_calculator_evaluates_arithmetic(
    example: ModuleType, expression: str, expected: str
) -> None:
    value = example._evaluate(ast.parse(expression, mode="eval").body)
    assert example.format_number(value) == expected


def test_calculator_refuses_anything_but_arithmetic(example: ModuleType) -> None:
    with pytest.raises(ValueError, match="only numbers"):
        example._evaluate(ast.parse("__import__('os').getcwd()", mode="eval").body)


def test_the_training_and_held_out_splits_share_no_question() -> None:
    def questions(split: str) -> set[str]:
        lines = (EXAMPLE / f"{split}.jsonl").read_text().splitlines()
        return {json.loads(line)["question"] for line in lines}

    assert len(questions("train")) == 48
    assert len(questions("eval")) == 16
    assert not questions("train") & questions("eval")


@pytest.mark.parametrize(
    ("text", "nearness"),
    [
        pytest.param("Final answer: 42", 1.0, id="right"),
        pytest.param("6 * 7 is 40.\nFinal answer: 40\nDone in 3 steps.", 40 / 42, id="marked-line"),
        pytest.param("It is 84", 0.0, id="off-by-the-answer"),
        pytest.param("Final answer: forty", 0.0, id="no-number"),
    ],
)
def test_closeness_reads_the_final_answers_number(
    example: ModuleType, text: str, nearness: float
) -> None:
    assert example.closeness(text, "42") == pytest.approx(nearness)
