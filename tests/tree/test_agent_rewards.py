"""Rewards keyed by agent (`InteractionCache.set_rewards`) and the per-agent reward scope."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rltap.record.errors import InteractionNotFound, InvalidReward
from rltap.record.types import InteractionWithTokenLogpReward, Link, ModelResponse
from rltap.tree.cache import InteractionCache

STUDENT, TUTOR = "Student", "Math Tutor"


def start(
    cache: InteractionCache, agent: str, parent: InteractionWithTokenLogpReward | None
) -> InteractionWithTokenLogpReward:
    """An in-flight call of `agent` below `parent` (a prefix link), or a root."""
    node = InteractionWithTokenLogpReward(messages=[{"role": "user", "content": f"{len(cache)}"}])
    node.parent = parent
    node.link = Link.ROOT if parent is None else Link.PREFIX
    return cache.add(node, agent=agent)


def finish(cache: InteractionCache, node: InteractionWithTokenLogpReward) -> None:
    prompt: list[int] = []
    if node.parent is not None and node.parent.model_response is not None:
        prompt = node.parent.model_response.input_tokens + node.parent.model_response.output_tokens
    base = 10 * (len(prompt) + 1)
    response = ModelResponse(
        input_tokens=[*prompt, base],
        output_tokens=[base + 1, base + 2],
        output_logprobs=[-0.5, -0.5],
        output_versions=[0, 0],
    )
    cache.complete(node.interaction_id, response, [{"role": "assistant", "content": "x"}])


@pytest.fixture
def role_play() -> tuple[InteractionCache, dict[str, InteractionWithTokenLogpReward]]:
    """A chain S1 -> T1 -> S2 -> T2, the student's and the tutor's calls in turn."""
    cache = InteractionCache()
    calls: dict[str, InteractionWithTokenLogpReward] = {}
    parent = None
    for name, agent in (("S1", STUDENT), ("T1", TUTOR), ("S2", STUDENT), ("T2", TUTOR)):
        parent = calls[name] = start(cache, agent, parent)
        finish(cache, parent)
    return cache, calls


def exported_rewards(
    cache: InteractionCache, calls: dict[str, Any], **settings: Any
) -> dict[str, float | None]:
    exported = cache.export_interactions(reward_discount=0.5, **settings)
    return {name: exported[node.interaction_id].reward for name, node in calls.items()}


@pytest.mark.parametrize(
    "mode", [pytest.param("tree", id="tree"), pytest.param("chain", id="chain")]
)
def test_each_agent_gets_its_own_reward_discounted_back_from_its_last_call(
    role_play: tuple[InteractionCache, dict[str, Any]], mode: str
) -> None:
    cache, calls = role_play
    targets = cache.set_rewards({TUTOR: 1.0, STUDENT: 0.2})
    assert targets.to_json() == {
        "keyed_by": "agent",
        "rewards": {calls["T2"].interaction_id: 1.0, calls["S2"].interaction_id: 0.2},
        "missing_agents": [],
    }
    per_agent = exported_rewards(cache, calls, mode=mode, reward_scope="agent")
    # The student's 0.2 passes through T1 to S1 (0.25 x 0.2), the tutor's 1.0 through S2 to
    # T1 (0.25 x 1.0); neither reaches the other agent's calls.
    assert per_agent == pytest.approx({"S1": 0.05, "T1": 0.25, "S2": 0.2, "T2": 1.0})
    episode = exported_rewards(cache, calls, mode=mode)
    assert episode == pytest.approx({"S1": 0.175, "T1": 0.35, "S2": 0.7, "T2": 1.0})


def test_the_tree_export_carries_the_per_agent_rewards_on_each_agents_tokens(
    role_play: tuple[InteractionCache, dict[str, Any]],
) -> None:
    cache, calls = role_play
    cache.set_rewards({TUTOR: 1.0, STUDENT: 0.2})
    pack = cache.export_tree(reward_discount=0.5, reward_scope="agent")
    by_token = {}
    for k, interaction_id in enumerate(pack.interaction_ids):
        values = np.unique(pack.rewards[pack.interaction_index == k])
        (by_token[interaction_id],) = values.tolist()
    expected = {"S1": 0.05, "T1": 0.25, "S2": 0.2, "T2": 1.0}
    assert by_token == pytest.approx(
        {calls[name].interaction_id: value for name, value in expected.items()}
    )


def test_an_agent_left_out_gets_zero_on_its_calls(
    role_play: tuple[InteractionCache, dict[str, Any]],
) -> None:
    cache, calls = role_play
    assert cache.set_rewards({TUTOR: 1.0}).missing_agents == [STUDENT]
    rewards = exported_rewards(cache, calls, reward_scope="agent")
    assert rewards == pytest.approx({"S1": 0.0, "T1": 0.25, "S2": 0.0, "T2": 1.0})


def test_an_agents_reward_goes_on_the_call_it_completed_last() -> None:
    cache = InteractionCache()
    root = start(cache, TUTOR, None)
    finish(cache, root)
    early, late = start(cache, STUDENT, root), start(cache, STUDENT, root)
    finish(cache, late)
    finish(cache, early)  # inserted first, completed last
    assert cache.set_rewards({STUDENT: 1.0, TUTOR: 0.0}).rewards == {
        early.interaction_id: 1.0,
        root.interaction_id: 0.0,
    }


def test_rewards_by_interaction_id_are_set_as_before(
    role_play: tuple[InteractionCache, dict[str, Any]],
) -> None:
    cache, calls = role_play
    targets = cache.set_rewards({calls["S2"].interaction_id: 1.0})
    assert (targets.keyed_by, targets.missing_agents) == ("interaction", [])
    assert exported_rewards(cache, calls) == pytest.approx(
        {"S1": 0.25, "T1": 0.5, "S2": 1.0, "T2": 0.0}
    )


@pytest.mark.parametrize(
    ("keys", "error", "message"),
    [
        pytest.param(
            [TUTOR, "Teacher"],
            InteractionNotFound,
            r"no interaction 'Teacher' in this session, nor an agent of its completed calls "
            r"\(agents: \['Math Tutor', 'Student'\]\)",
            id="unknown-key",
        ),
        pytest.param(
            [TUTOR, "S1"],
            InvalidReward,
            r"rewards mix interaction ids \('chatcmpl-.*'\) and agents \('Math Tutor'\)",
            id="mixed-keys",
        ),
    ],
)
def test_a_wrong_key_is_an_error_and_sets_no_reward(
    role_play: tuple[InteractionCache, dict[str, Any]],
    keys: list[str],
    error: type[Exception],
    message: str,
) -> None:
    cache, calls = role_play
    named = {key: calls[key].interaction_id if key in calls else key for key in keys}
    with pytest.raises(error, match=message):
        cache.set_rewards(dict.fromkeys(named.values(), 1.0))
    assert all(node.reward is None for node in cache.values())


def test_a_reward_that_is_not_a_number_is_refused(
    role_play: tuple[InteractionCache, dict[str, Any]],
) -> None:
    cache, _ = role_play
    with pytest.raises(InvalidReward, match="finite number"):
        cache.set_rewards({TUTOR: float("nan")})
