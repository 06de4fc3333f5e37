"""examples/langchain_math runs as its README says, and pickles for subprocess mode."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rltap.rollout.workflow import OpenAIProxyWorkflow, load_object, resolve_workflow
from rltap.testing import RunningProxy

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_math"


async def test_math_chain_rewards_the_calculators_answer(proxy: RunningProxy) -> None:
    workflow = resolve_workflow(
        f"{EXAMPLE / 'agent.py'}:Agent", proxy_addr=proxy.url, admin_key=proxy.admin_key
    )
    assert isinstance(workflow, OpenAIProxyWorkflow)
    agent = pickle.loads(pickle.dumps(workflow.agent))
    rows = [json.loads(line) for line in (EXAMPLE / "data.jsonl").read_text().splitlines()]
    try:
        # The script's calculator call is 2+3: rows answering 5 earn 1.0, the others 0.0.
        for row in (rows[0], rows[1]):
            assert await agent.run(row, base_url=proxy.base_url, api_key=await _key(proxy)) == (
                1.0 if row["answer"] == "5" else 0.0
            )
        episode = await workflow.run_episode(rows[0])
    finally:
        await workflow.aclose()
    assert episode.interactions is not None
    first, second = episode.interactions.values()
    assert second.parent is first
    assert second.reward == 1.0


async def _key(proxy: RunningProxy) -> str:
    _, key = await proxy.start_session()
    return key


@pytest.fixture(scope="module")
def example() -> ModuleType:
    # The module rltap loads the agent from (loaded once: the same module as the rollout's).
    return sys.modules[load_object(f"{EXAMPLE / 'agent.py'}:Agent").__module__]


@pytest.mark.parametrize(
    ("reply", "reward"),
    [
        pytest.param("7 + 11 = 18.\nFinal answer: 18", 1.0, id="right"),
        pytest.param("The sum is 18.", 1.0, id="right-unmarked"),
        pytest.param("Final answer: 17", 0.2 + 0.3 * 17 / 18, id="near-marked"),
        pytest.param("The sum is 17, I think.", 0.3 * 17 / 18, id="near-unmarked"),
        pytest.param("Final answer: 27", 0.2 + 0.3 * 9 / 18, id="farther-marked"),
        pytest.param("The sum is 40.", 0.0, id="off-by-more-than-the-answer"),
        pytest.param("Final answer: eighteen", 0.0, id="marker-without-number"),
    ],
)
def test_shaped_reward_credits_format_and_nearness_below_a_right_answer(
    example: ModuleType, reply: str, reward: float
) -> None:
    assert example.shaped_reward(reply, {"answer": "18"}) == pytest.approx(reward)


async def test_shaped_agent_trains_on_the_shaped_reward(proxy: RunningProxy) -> None:
    workflow = resolve_workflow(
        f"{EXAMPLE / 'agent.py'}:ShapedAgent", proxy_addr=proxy.url, admin_key=proxy.admin_key
    )
    assert isinstance(workflow, OpenAIProxyWorkflow)
    agent = pickle.loads(pickle.dumps(workflow.agent))
    try:
        # The script answers "Final answer: 5" after calculator(2+3): wrong for 12 + 7, 14 off.
        row = {"question": "What is 12 + 7?", "answer": "19"}
        reward = await agent.run(row, base_url=proxy.base_url, api_key=await _key(proxy))
        assert reward == pytest.approx(0.2 + 0.3 * 5 / 19)
    finally:
        await workflow.aclose()


def test_the_training_and_held_out_splits_share_no_question() -> None:
    def questions(split: str) -> set[str]:
        lines = (EXAMPLE / f"{split}.jsonl").read_text().splitlines()
        return {json.loads(line)["question"] for line in lines}

    assert (len(questions("train")), len(questions("eval"))) == (48, 16)
    assert not questions("train") & questions("eval")
