"""Where a dict of rewards goes: to interactions by id, or to agents by name.

An agent's `run()` may return `{interaction_id: reward}` or `{agent: reward}`, the agents being
those of the episode's calls (`X-Rltap-Agent`, `agent_id`). An agent's reward goes on its last
completed call; exported with reward scope "agent" (`rltap.tree.rewards`), it is discounted back
to that agent's calls only. Keys are all of one kind: a dict mixing them is an `InvalidReward`,
a key of neither kind an `InteractionNotFound`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rltap.record.errors import InteractionNotFound, InvalidReward

__all__ = ["RewardTargets", "reward_targets"]


@dataclass(frozen=True)
class RewardTargets:
    """What a dict of rewards was keyed by, the reward of each interaction it sets, and (keyed
    by agent) the agents of completed calls it leaves out, whose calls get 0."""

    keyed_by: Literal["interaction", "agent"]
    rewards: dict[str, float]
    missing_agents: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The answer of `POST /rl/set_rewards`."""
        return {
            "keyed_by": self.keyed_by,
            "rewards": self.rewards,
            "missing_agents": self.missing_agents,
        }


def reward_targets(
    rewards: Mapping[str, float],
    interaction_ids: Collection[str],
    last_call_of: Mapping[str, str],
) -> RewardTargets:
    """Where `rewards` go: keys among `interaction_ids` reward those interactions; keys among
    `last_call_of` (agent -> its last completed call) reward that call of each agent."""
    by_id = [key for key in rewards if key in interaction_ids]
    by_agent = [key for key in rewards if key not in interaction_ids and key in last_call_of]
    unknown = [key for key in rewards if key not in interaction_ids and key not in last_call_of]
    if unknown:
        msg = (
            f"no interaction {unknown[0]!r} in this session, nor an agent of its completed "
            f"calls (agents: {sorted(last_call_of)}); reward keys must be one or the other"
        )
        raise InteractionNotFound(msg, param="rewards")
    if by_id and by_agent:
        msg = (
            f"rewards mix interaction ids ({by_id[0]!r}) and agents ({by_agent[0]!r}); key "
            "them all by interaction id or all by agent"
        )
        raise InvalidReward(msg, param="rewards")
    if not by_agent:
        return RewardTargets("interaction", dict(rewards))
    placed = {last_call_of[agent]: rewards[agent] for agent in by_agent}
    missing = sorted(set(last_call_of) - set(by_agent))
    return RewardTargets("agent", placed, missing)
