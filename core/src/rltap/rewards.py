"""Reward discounting: backwards along the conversation tree, or along insertion order.

Tree mode: each complete interaction gets `own + turn_discount * aggregate(children)`, leaves
first, where `own` is the reward assigned to it (0 when unset) and `aggregate` is the mean, max or
sum of its children's discounted rewards, each times the factor of the child's link kind
(`link_factors`: keys `prefix`, `rewrite`, `handoff`, `subagent`, each in [0, 1], 1.0 unless
given; `rltap.links`). Sibling branches never see each other's reward. A chain A -> B -> C with
C = 1.0 and discount 0.9 gives B = 0.9 and A = 0.81, whatever kinds its links are with the default
factors; with `{"handoff": 0.5}` and B a handoff from A, A = 0.405.

Chain mode reproduces what insertion-order systems do: the i-th interaction gets
`own_i + turn_discount * discounted_{i+1}`, whatever the tree looks like.

Both return a fresh mapping and never mutate the interactions, so they can be applied any number
of times with the same result.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from rltap.errors import InvalidRequest, InvalidReward
from rltap.types import InteractionWithTokenLogpReward, Link

__all__ = [
    "LINK_FACTOR_KEYS",
    "Aggregate",
    "DiscountMode",
    "LinkFactors",
    "check_link_factors",
    "check_reward",
    "discount_along_tree",
    "discount_chain",
    "discount_rewards",
]

Aggregate = Literal["mean", "max", "sum"]
DiscountMode = Literal["tree", "chain"]
LinkFactors = Mapping[str, float]
# Every link kind a child can have; a root has no parent to pass reward to.
LINK_FACTOR_KEYS = tuple(link.value for link in Link if link is not Link.ROOT)

_AGGREGATES: dict[str, Callable[[list[float]], float]] = {
    "mean": lambda values: sum(values) / len(values),
    "max": max,
    "sum": sum,
}


_FLOAT32_MAX = 3.4028234663852886e38


def check_reward(reward: object) -> float:
    """A reward as a float; `InvalidReward` for anything non-numeric or non-finite."""
    if isinstance(reward, bool) or not isinstance(reward, numbers.Real):
        msg = f"reward must be a finite number, got {type(reward).__name__} {reward!r}"
        raise InvalidReward(msg, param="reward")
    value = float(reward)
    if not math.isfinite(value):
        msg = f"reward must be a finite number, got {value}"
        raise InvalidReward(msg, param="reward")
    if abs(value) > _FLOAT32_MAX:  # exported as float32: it would become inf
        msg = f"reward {value} is outside the float32 range of the exported tensors"
        raise InvalidReward(msg, param="reward")
    return value


def _own(node: InteractionWithTokenLogpReward) -> float:
    return 0.0 if node.reward is None else float(node.reward)


def check_link_factors(link_factors: LinkFactors | None) -> dict[str, float]:
    """The factor of every link kind a child can have: 1.0 unless `link_factors` sets it;
    `InvalidRequest` for an unknown kind or a factor outside [0, 1]."""
    factors = dict.fromkeys(LINK_FACTOR_KEYS, 1.0)
    for key, value in (link_factors or {}).items():
        if key not in LINK_FACTOR_KEYS:
            msg = f"link_factors key must be one of {list(LINK_FACTOR_KEYS)}, got {key!r}"
            raise InvalidRequest(msg, param="link_factors")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            msg = f"link_factors[{key!r}] must be a number, got {value!r}"
            raise InvalidRequest(msg, param="link_factors")
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            msg = f"link_factors[{key!r}] must be in [0, 1], got {value}"
            raise InvalidRequest(msg, param="link_factors")
        factors[key] = float(value)
    return factors


def _link_of(node: InteractionWithTokenLogpReward) -> str:
    return (node.link or Link.PREFIX).value


def _check_discount(turn_discount: float) -> None:
    if not (math.isfinite(turn_discount) and 0.0 <= turn_discount <= 1.0):
        msg = f"turn_discount must be in [0, 1], got {turn_discount}"
        raise InvalidRequest(msg, param="discount")


def discount_along_tree(
    nodes: Sequence[InteractionWithTokenLogpReward],
    turn_discount: float,
    aggregate: Aggregate = "mean",
    link_factors: LinkFactors | None = None,
) -> dict[str, float]:
    """Discounted reward of every node, children before parents (see the module docstring).

    `nodes` are the interactions to discount; a node whose parent is not among them is a root.
    """
    _check_discount(turn_discount)
    factors = check_link_factors(link_factors)
    try:
        agg = _AGGREGATES[aggregate]
    except KeyError:
        msg = f"aggregate must be one of {sorted(_AGGREGATES)}, got {aggregate!r}"
        raise InvalidRequest(msg, param="aggregate") from None
    by_id = {node.interaction_id: node for node in nodes}
    children: dict[str, list[str]] = {node_id: [] for node_id in by_id}
    roots: list[str] = []
    for node_id, node in by_id.items():
        parent_id = node.parent_id
        if parent_id is not None and parent_id in by_id:
            children[parent_id].append(node_id)
        else:
            roots.append(node_id)
    # Parents before children (BFS from the roots); walking it backwards visits leaves first.
    order = roots
    for node_id in order:
        order.extend(children[node_id])
    discounted: dict[str, float] = {}
    for node_id in reversed(order):
        kids = children[node_id]
        value = _own(by_id[node_id])
        if kids:
            passed = [factors[_link_of(by_id[kid])] * discounted[kid] for kid in kids]
            value += turn_discount * agg(passed)
        discounted[node_id] = value
    return {node_id: discounted[node_id] for node_id in by_id}


def discount_chain(
    nodes: Sequence[InteractionWithTokenLogpReward], turn_discount: float
) -> dict[str, float]:
    """Insertion-order discounting: each node's own reward plus the discounted next one."""
    _check_discount(turn_discount)
    discounted: dict[str, float] = {}
    following = 0.0
    for index, node in enumerate(reversed(nodes)):
        value = _own(node) if index == 0 else _own(node) + turn_discount * following
        discounted[node.interaction_id] = value
        following = value
    return {node.interaction_id: discounted[node.interaction_id] for node in nodes}


def discount_rewards(
    nodes: Sequence[InteractionWithTokenLogpReward],
    turn_discount: float = 1.0,
    aggregate: Aggregate = "mean",
    mode: DiscountMode = "tree",
    link_factors: LinkFactors | None = None,
) -> dict[str, float]:
    """Discounted rewards by `mode`: "tree" (default) or "chain" (insertion order, which has
    no links: `link_factors` are checked, not used)."""
    if mode == "tree":
        return discount_along_tree(nodes, turn_discount, aggregate, link_factors)
    if mode == "chain":
        check_link_factors(link_factors)
        return discount_chain(nodes, turn_discount)
    msg = f"mode must be 'tree' or 'chain', got {mode!r}"
    raise InvalidRequest(msg, param="mode")
