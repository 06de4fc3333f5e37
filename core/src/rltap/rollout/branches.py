"""An episode's branches as other trainers take them: a prompt, then a completion with a mask.

TRL's `GRPOTrainer` (`rollout_func`) and verl's agent loop (`AgentLoopOutput`) both want one
row per sequence, split in two: the prompt the first call consumed (`prompt_ids`) and
everything after it (`completion_ids`), with a mask that is 1 on the tokens the policy sampled
and 0 on what it did not (tool results, later prompts' new tokens), the recorded logprobs and
versions on the same positions. That is the `concat` export (`rltap.tree.export`), one branch
per interaction no call continues by a `prefix` link, cut at its first generated token.

An episode exported as style "individual" (`OpenAIProxyWorkflow` with its default style) holds
every interaction with its parent, so its branches are rebuilt here with the export's own
functions (`concat_leaves`, `branch_sequence`, the same token-by-token check) and each branch
also knows the interactions it is made of. A branch's `reward` is its leaf's discounted reward
(`rltap.tree.rewards`): sibling branches of one episode keep their own credit.

Usage:
    workflow = OpenAIProxyWorkflow(agent, proxy_addr=url, admin_key=key)
    episode = await workflow.run_episode({"question": "2+2?"})
    rows = episode_branches(episode)  # [] for a rejected episode: see `episode.error`
    per_episode = require_branches(episodes)  # AllEpisodesFailed when none left a branch
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rltap.record.types import InteractionWithTokenLogpReward
from rltap.rollout.loading import WorkflowError
from rltap.rollout.workflow import Episode
from rltap.tree.export import branch_sequence, concat_leaves

__all__ = ["AllEpisodesFailed", "Branch", "episode_branches", "require_branches"]


@dataclass(frozen=True, slots=True)
class Branch:
    """One branch of an episode, split where trainers split a sequence.

    `completion_mask` is 1 on the tokens the policy sampled, 0 on the rest; on its 0 positions
    `completion_logprobs` is 0.0 and `completion_versions` -1. `interaction_ids` are the calls
    the branch is made of, first to last; `reward` is the last one's discounted reward.
    """

    session_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    completion_logprobs: list[float]
    completion_versions: list[int]
    reward: float
    interaction_ids: list[str]
    agent_id: str | None = None
    policy: str | None = None

    @property
    def sampled_versions(self) -> list[int]:
        """The policy versions of the sampled tokens (in order)."""
        return [v for v, m in zip(self.completion_versions, self.completion_mask, strict=True) if m]


class AllEpisodesFailed(WorkflowError):
    """Every episode a trainer asked for failed, so there is nothing to train on: raised with
    the agents' own errors rather than handing a trainer an empty batch."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        shown = "; ".join(dict.fromkeys(self.errors))  # each distinct error once
        msg = f"all {len(self.errors)} episodes failed, nothing to train on: {shown}"
        super().__init__(msg)


def episode_branches(episode: Episode) -> list[Branch]:
    """`episode`'s branches in the order their last calls completed; [] when it was rejected.

    The episode must be exported as style "individual" (every interaction, with its parent).
    """
    if episode.interactions is None:
        return []
    if episode.pack is not None:
        msg = "episode_branches reads an episode exported as style 'individual', not 'tree'"
        raise WorkflowError(msg)
    nodes = list(episode.interactions.values())
    return [_branch(episode.session_id, leaf) for leaf in concat_leaves(nodes)]


def require_branches(episodes: Sequence[Episode]) -> list[list[Branch]]:
    """Each of `episodes`' branches (`episode_branches`, an empty list for a rejected one);
    `AllEpisodesFailed` when no episode left a branch."""
    branches = [episode_branches(episode) for episode in episodes]
    if not any(branches):
        errors = [episode.error or "the agent made no LLM call" for episode in episodes]
        raise AllEpisodesFailed(errors)
    return branches


def _branch(session_id: str, leaf: InteractionWithTokenLogpReward) -> Branch:
    sequence = branch_sequence(leaf)
    mask = sequence.loss_mask
    start = mask.index(1) if 1 in mask else len(mask)
    ids: list[str] = []
    node: InteractionWithTokenLogpReward | None = leaf
    while node is not None:
        ids.append(node.interaction_id)
        node = node.token_parent
    return Branch(
        session_id=session_id,
        prompt_ids=sequence.input_ids[:start],
        completion_ids=sequence.input_ids[start:],
        completion_mask=mask[start:],
        completion_logprobs=sequence.logprobs[start:],
        completion_versions=sequence.versions[start:],
        reward=float(leaf.reward or 0.0),
        interaction_ids=ids[::-1],
        agent_id=leaf.agent_id,
        policy=leaf.policy,
    )
