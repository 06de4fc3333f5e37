from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rltap.record.errors import InvalidRequest
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.tree.cache import InteractionCache

Record = Callable[..., InteractionWithTokenLogpReward]


def turns(*texts: str) -> list[dict[str, Any]]:
    """A conversation alternating user and assistant, starting with the user."""
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)]


def test_the_seed_example_chain(record: Record, cache: InteractionCache) -> None:
    a = record(turns("q1"), "a1")
    b = record(turns("q1", "a1", "q2"), "a2")
    c = record(turns("q1", "a1", "q2", "a2", "q3"), "a3", reward=1.0)
    rewards = cache.apply_reward_discount(turn_discount=0.9)
    assert rewards[c.interaction_id] == pytest.approx(1.0)
    assert rewards[b.interaction_id] == pytest.approx(0.9)
    assert rewards[a.interaction_id] == pytest.approx(0.81)


def test_siblings_never_leak_into_each_other(record: Record, cache: InteractionCache) -> None:
    root = record(turns("q"), "a")
    good = record(turns("q", "a", "left"), "l", reward=1.0)
    bad = record(turns("q", "a", "right"), "r", reward=0.0)
    rewards = cache.apply_reward_discount(turn_discount=0.5)
    assert rewards[good.interaction_id] == 1.0
    assert rewards[bad.interaction_id] == 0.0
    assert rewards[root.interaction_id] == pytest.approx(0.5 * 0.5)


@pytest.mark.parametrize(
    ("aggregate", "expected_root"),
    [
        pytest.param("mean", 0.2 + 0.5 * (1.0 + 0.0 + 0.5) / 3, id="mean"),
        pytest.param("max", 0.2 + 0.5 * 1.0, id="max"),
        pytest.param("sum", 0.2 + 0.5 * 1.5, id="sum"),
    ],
)
def test_aggregates(
    record: Record, cache: InteractionCache, aggregate: Any, expected_root: float
) -> None:
    root = record(turns("q"), "a", reward=0.2)
    for text, reward in (("x", 1.0), ("y", 0.0), ("z", 0.5)):
        record(turns("q", "a", text), text, reward=reward)
    rewards = cache.apply_reward_discount(turn_discount=0.5, aggregate=aggregate)
    assert rewards[root.interaction_id] == pytest.approx(expected_root)


def test_chain_mode_follows_insertion_order_across_branches(
    record: Record, cache: InteractionCache
) -> None:
    root = record(turns("q"), "a")
    left = record(turns("q", "a", "left"), "l", reward=1.0)
    right = record(turns("q", "a", "right"), "r")
    rewards = cache.apply_reward_discount(turn_discount=0.9, mode="chain")
    # Insertion order root, left, right: the left branch receives the right branch's reward.
    assert rewards[right.interaction_id] == 0.0
    assert rewards[left.interaction_id] == pytest.approx(1.0)
    assert rewards[root.interaction_id] == pytest.approx(0.9)
    tree = cache.apply_reward_discount(turn_discount=0.9, mode="tree")
    assert tree[root.interaction_id] == pytest.approx(0.9 * 0.5)


def test_discounting_twice_gives_the_same_result(record: Record, cache: InteractionCache) -> None:
    record(turns("q1"), "a1")
    record(turns("q1", "a1", "q2"), "a2", reward=1.0)
    first = cache.export_interactions(reward_discount=0.9)
    second = cache.export_interactions(reward_discount=0.9)
    assert {k: v.reward for k, v in first.items()} == {k: v.reward for k, v in second.items()}
    assert [node.reward for node in cache.values()] == [None, 1.0]


def test_export_uses_the_discount_applied_before(record: Record, cache: InteractionCache) -> None:
    a = record(turns("q1"), "a1")
    record(turns("q1", "a1", "q2"), "a2", reward=1.0)
    cache.apply_reward_discount(turn_discount=0.5)
    assert cache.export_interactions()[a.interaction_id].reward == pytest.approx(0.5)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"turn_discount": 1.5}, id="discount-above-one"),
        pytest.param({"turn_discount": float("nan")}, id="discount-nan"),
        pytest.param({"aggregate": "median"}, id="aggregate"),
        pytest.param({"mode": "graph"}, id="mode"),
    ],
)
def test_bad_settings_are_refused(
    record: Record, cache: InteractionCache, kwargs: dict[str, Any]
) -> None:
    record(turns("q"), "a")
    with pytest.raises(InvalidRequest):
        cache.apply_reward_discount(**kwargs)
