"""The reward function that hands TRL the reward each agent's episode earned."""

from __future__ import annotations

from typing import Any

__all__ = ["rltap_reward"]


def rltap_reward(
    completions: list[Any], rltap_reward: list[float | None], **kwargs: Any
) -> list[float | None]:
    """TRL reward function: each row's reward as the agent gave it (its branch's discounted
    reward, `rltap.rollout.branches.Branch.reward`), None for an inert row, which TRL leaves
    unscored (advantage 0, out of its group's mean and std).

    `rltap_reward` is the extra field `AgentRollout` returns per row; TRL passes every extra
    field to every reward function by name.
    """
    if len(rltap_reward) != len(completions):
        msg = (
            f"{len(rltap_reward)} rltap rewards for {len(completions)} completions: use "
            "rltap_reward with AgentRollout as the trainer's rollout_func"
        )
        raise ValueError(msg)
    return list(rltap_reward)
