"""Reward discounting: backwards along the conversation tree, or along insertion order.

Tree mode: each complete interaction gets `own + turn_discount * aggregate(continuations)`,
where `own` is the reward assigned to it (0 when unset) and `aggregate` is the mean, max or sum of
the discounted rewards of its continuations (its children by a `prefix`, `rewrite`, `handoff`
or `carry` link), each times the factor of the child's link kind (`link_factors`: keys `prefix`,
`rewrite`, `handoff`, `subagent`, `carry`, each in [0, 1], 1.0 unless given; `rltap.tree.links`).
Sibling branches never see each other's reward. A chain A -> B -> C with C = 1.0 and discount 0.9
gives B = 0.9 and A = 0.81, whatever kinds its links are with the default factors; with
`{"handoff": 0.5}` and B a handoff from A, A = 0.405.

A sub-agent's calls (the subtree below a `subagent` link) are not a branch the episode could have
taken instead: their answer is the tool result the calling agent goes on with. So their credit
comes from that continuation, and the calling agent's from its continuation alone. A sub-agent
call that nothing continues gets `own + turn_discount * factor["subagent"] * aggregate(...)`,
the same aggregate its anchor (the call that opened the tool call) gets from its continuations;
the sub-agent's other calls are discounted back from there as usual. An orchestrator O1 that
calls a translator S, then answers in O2 (rewarded 1.0): O2 = 1.0, O1 = 0.9, S = 0.9.

Chain mode reproduces what insertion-order systems do: the i-th interaction gets
`own_i + turn_discount * discounted_{i+1}`, whatever the tree looks like.

Both return a fresh mapping and never mutate the interactions, so they can be applied any number
of times with the same result.

Scope "episode" (the default) discounts every reward over the whole tree: in a multi-agent
episode every agent's calls share the episode's reward (cooperative). Scope "agent" runs one pass
per agent (`agent_id`; the calls that name none are one more): each pass takes only that agent's
calls' own rewards, discounts them back as above, through any call whatever its agent, and that
agent's calls keep the values of their pass. Another agent's reward never reaches them: a chain
S1 -> T1 -> S2 of a student's, a tutor's and the student's calls, T1 rewarded 1.0, S2 0.2,
discount 0.9, gives S1 = 0.162 (0.9 x 0.9 x 0.2; scope "episode": 1.062), T1 = 1.0, S2 = 0.2.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from rltap.record.errors import InvalidRequest, InvalidReward
from rltap.record.types import InteractionWithTokenLogpReward, Link

__all__ = [
    "LINK_FACTOR_KEYS",
    "Aggregate",
    "DiscountMode",
    "LinkFactors",
    "RewardScope",
    "check_link_factors",
    "check_reward",
    "discount_along_tree",
    "discount_chain",
    "discount_rewards",
]

Aggregate = Literal["mean", "max", "sum"]
DiscountMode = Literal["tree", "chain"]
RewardScope = Literal["episode", "agent"]
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


def _placed(node: InteractionWithTokenLogpReward, own: Mapping[str, float] | None) -> float:
    """The reward a pass starts from at `node`: its own, or what `own` places there (else 0)."""
    return _own(node) if own is None else own.get(node.interaction_id, 0.0)


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
    *,
    own: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Discounted reward of every node (see the module docstring).

    `nodes` are the interactions to discount; a node whose parent is not among them is a root.
    `own`: the rewards to start from by interaction id (the others 0) instead of the nodes'.
    """
    _check_discount(turn_discount)
    factors = check_link_factors(link_factors)
    try:
        agg = _AGGREGATES[aggregate]
    except KeyError:
        msg = f"aggregate must be one of {sorted(_AGGREGATES)}, got {aggregate!r}"
        raise InvalidRequest(msg, param="aggregate") from None
    by_id = {node.interaction_id: node for node in nodes}
    shape = _TreeShape(by_id)
    discounted: dict[str, float] = {}
    tails: dict[str, float] = {}

    def tail(node_id: str) -> float:
        """What `node_id` gets from its continuations, before the discount."""
        if node_id not in tails:
            kids = shape.continuations[node_id]
            tails[node_id] = agg([factors[_link_of(by_id[k])] * discounted[k] for k in kids])
        return tails[node_id]

    for node_id in shape.evaluation_order():
        value = _placed(by_id[node_id], own)
        anchor = shape.anchor[node_id]
        if shape.continuations[node_id]:
            value += turn_discount * tail(node_id)
        elif anchor is not None and shape.continuations[anchor]:
            value += turn_discount * factors[Link.SUBAGENT.value] * tail(anchor)
        discounted[node_id] = value
    return {node_id: discounted[node_id] for node_id in by_id}


class _TreeShape:
    """Who passes reward to whom: each node's continuations (its children by any link but
    `subagent`) and its anchor (the call whose open tool call the sub-agent it belongs to
    answers; None outside a sub-agent)."""

    def __init__(self, by_id: Mapping[str, InteractionWithTokenLogpReward]) -> None:
        self.continuations: dict[str, list[str]] = {node_id: [] for node_id in by_id}
        children: dict[str, list[str]] = {node_id: [] for node_id in by_id}
        roots: list[str] = []
        for node_id, node in by_id.items():
            parent_id = node.parent_id
            if parent_id is None or parent_id not in by_id:
                roots.append(node_id)
                continue
            children[parent_id].append(node_id)
            if node.link is not Link.SUBAGENT:
                self.continuations[parent_id].append(node_id)
        self.anchor: dict[str, str | None] = dict.fromkeys(roots)
        order = roots  # parents before children: a child's anchor comes from its parent's
        for node_id in order:
            for kid in children[node_id]:
                is_subagent = by_id[kid].link is Link.SUBAGENT
                self.anchor[kid] = node_id if is_subagent else self.anchor[node_id]
                order.append(kid)

    def _needs(self, node_id: str) -> list[str]:
        """The nodes whose discounted rewards `node_id`'s is made of."""
        kids = self.continuations[node_id]
        anchor = self.anchor[node_id]
        return kids if kids or anchor is None else self.continuations[anchor]

    def evaluation_order(self) -> list[str]:
        """Every node after the ones it needs (an iterative depth-first post-order)."""
        order: list[str] = []
        done: set[str] = set()
        opened: set[str] = set()
        for start in self.continuations:
            stack = [start]
            while stack:
                node_id = stack[-1]
                if node_id in done:
                    stack.pop()
                    continue
                pending = [other for other in self._needs(node_id) if other not in done]
                if not pending:
                    done.add(node_id)
                    order.append(node_id)
                    stack.pop()
                    continue
                if node_id in opened:  # links only point back in time: this cannot happen
                    msg = f"reward dependencies form a cycle at {node_id}"
                    raise RuntimeError(msg)
                opened.add(node_id)
                stack.extend(pending)
        return order


def discount_chain(
    nodes: Sequence[InteractionWithTokenLogpReward],
    turn_discount: float,
    *,
    own: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Insertion-order discounting: each node's own reward plus the discounted next one;
    `own` as `discount_along_tree`'s."""
    _check_discount(turn_discount)
    discounted: dict[str, float] = {}
    following = 0.0
    for index, node in enumerate(reversed(nodes)):
        start = _placed(node, own)
        value = start if index == 0 else start + turn_discount * following
        discounted[node.interaction_id] = value
        following = value
    return {node.interaction_id: discounted[node.interaction_id] for node in nodes}


def discount_rewards(
    nodes: Sequence[InteractionWithTokenLogpReward],
    turn_discount: float = 1.0,
    aggregate: Aggregate = "mean",
    mode: DiscountMode = "tree",
    link_factors: LinkFactors | None = None,
    scope: RewardScope = "episode",
) -> dict[str, float]:
    """Discounted rewards by `mode`: "tree" (default) or "chain" (insertion order, which has
    no links: `link_factors` are checked, not used); by `scope`: "episode" (default) or
    "agent" (a pass per agent, see the module docstring)."""
    if mode not in ("tree", "chain"):
        msg = f"mode must be 'tree' or 'chain', got {mode!r}"
        raise InvalidRequest(msg, param="mode")
    if scope == "episode":
        return _discount(nodes, turn_discount, aggregate, mode, link_factors, None)
    if scope != "agent":
        msg = f"reward_scope must be 'episode' or 'agent', got {scope!r}"
        raise InvalidRequest(msg, param="reward_scope")
    calls_of: dict[str | None, list[InteractionWithTokenLogpReward]] = {}
    for node in nodes:
        calls_of.setdefault(node.agent_id, []).append(node)
    discounted: dict[str, float] = {}
    for calls in calls_of.values():
        own = {node.interaction_id: _own(node) for node in calls}
        passed = _discount(nodes, turn_discount, aggregate, mode, link_factors, own)
        discounted.update((node.interaction_id, passed[node.interaction_id]) for node in calls)
    return {node.interaction_id: discounted[node.interaction_id] for node in nodes}


def _discount(
    nodes: Sequence[InteractionWithTokenLogpReward],
    turn_discount: float,
    aggregate: Aggregate,
    mode: DiscountMode,
    link_factors: LinkFactors | None,
    own: Mapping[str, float] | None,
) -> dict[str, float]:
    if mode == "tree":
        return discount_along_tree(nodes, turn_discount, aggregate, link_factors, own=own)
    check_link_factors(link_factors)
    return discount_chain(nodes, turn_discount, own=own)
