"""The tree checks every framework's test makes (`rltap.testing.trees`) fail where they must."""

from __future__ import annotations

from typing import Any

import pytest

from rltap.testing.trees import assert_one_tree, assert_reward_reaches_every_call, link_kinds


def item(interaction_id: str, parent_id: str | None, link: str, reward: float) -> dict[str, Any]:
    return {
        "interaction_id": interaction_id,
        "parent_id": parent_id,
        "link": link,
        "reward": reward,
    }


CHAIN = [item("a", None, "root", 0.81), item("b", "a", "carry", 0.9), item("c", "b", "prefix", 1.0)]


def test_a_chain_is_one_tree_whose_every_call_has_reward() -> None:
    assert_one_tree(CHAIN, ["root", "carry", "prefix"])
    assert_one_tree(CHAIN, ["prefix", "root", "carry"])  # concurrent calls: any order
    assert_reward_reaches_every_call(CHAIN)
    assert link_kinds(CHAIN) == ["root", "carry", "prefix"]


@pytest.mark.parametrize(
    ("items", "links", "message"),
    [
        pytest.param([], None, "no call", id="empty"),
        pytest.param([*CHAIN, item("d", None, "root", 0.0)], None, "2 trees", id="two-roots"),
        pytest.param([*CHAIN, item("d", "x", "carry", 0.5)], None, "outside", id="stray-parent"),
        pytest.param(CHAIN, ["root", "prefix", "prefix"], "expected", id="wrong-links"),
    ],
)
def test_what_is_not_one_tree_fails(
    items: list[dict[str, Any]], links: list[str] | None, message: str
) -> None:
    with pytest.raises(AssertionError, match=message):
        assert_one_tree(items, links)


def test_a_call_the_reward_did_not_reach_fails() -> None:
    cold = [*CHAIN[:2], {**CHAIN[2], "reward": 0.0}]
    with pytest.raises(AssertionError, match="did not reach"):
        assert_reward_reaches_every_call(cold)
