"""The rows TRL's `rollout_func` returns, from the episodes' branches.

TRL hands `rollout_func` the prompts of this process's part of a generation batch, each already
repeated `num_generations` times in a row (its `RepeatSampler`), and scores row i with the
dataset row i it came from; GRPO then compares the rewards in consecutive blocks of
`num_generations` rows of the batch gathered over every process. So rollout_func must return
exactly one row per prompt it was given, and a prompt group is a block of that many rows
(`prompt_groups`; on several processes a block may straddle two of them, each getting its part).

A group's rows are filled with its episodes' branches in order (`fill_group`); rows left over (a
failed episode, or fewer branches than rows) become inert rows: one pad token as prompt and as
completion, env_mask 0 (nothing trains on it) and reward None, which TRL treats as unscorable
(advantage 0, left out of the group's mean and std). More branches than rows is
`TooManyBranches`: dropping some would train on a biased sample of the episode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rltap.rollout.branches import Branch
from rltap.rollout.loading import WorkflowError

__all__ = [
    "REWARD_FIELD",
    "SESSION_FIELD",
    "PromptGroup",
    "TooManyBranches",
    "episodes_in_group",
    "fill_group",
    "prompt_groups",
    "rollout_output",
]

# The extra fields of rollout_func's output: TRL passes them to every reward function by name.
REWARD_FIELD = "rltap_reward"
SESSION_FIELD = "rltap_session_id"


class TooManyBranches(WorkflowError):
    """A prompt group's episodes left more branches than TRL has rows for that prompt."""


@dataclass(frozen=True, slots=True)
class PromptGroup:
    """Rows `start` to `stop` (this process's rows) of one prompt, out of the
    `num_generations` rows of its group."""

    start: int
    stop: int
    num_generations: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


def prompt_groups(prompts: Sequence[Any], num_generations: int, offset: int) -> list[PromptGroup]:
    """This process's rows cut at TRL's group boundaries; `offset` is the batch position of
    its first row (`process_index * len(prompts)`). Each group must repeat one prompt."""
    groups: list[PromptGroup] = []
    start = 0
    while start < len(prompts):
        stop = min(len(prompts), start + num_generations - (offset + start) % num_generations)
        if any(prompt != prompts[start] for prompt in prompts[start:stop]):
            msg = (
                f"rows {start}-{stop - 1} of TRL's batch should repeat one prompt "
                f"(num_generations={num_generations}), got different prompts: rltap_trl "
                "reads TRL 1.16's batch layout (each prompt repeated num_generations times)"
            )
            raise WorkflowError(msg)
        groups.append(PromptGroup(start, stop, num_generations))
        start = stop
    return groups


def episodes_in_group(group: PromptGroup, episodes_per_prompt: int | None) -> int:
    """How many episodes `group` runs: `episodes_per_prompt` per `num_generations` rows (a
    group cut between processes: its share, rounded up); None: one per row."""
    if episodes_per_prompt is None:
        return group.rows
    return math.ceil(episodes_per_prompt * group.rows / group.num_generations)


def fill_group(
    group: PromptGroup, episodes: Sequence[Sequence[Branch]], episodes_per_prompt: int | None
) -> list[Branch | None]:
    """`group`'s rows: its episodes' branches in order, then None (an inert row) for each
    row left; raises `TooManyBranches` when they do not fit."""
    branches = [branch for episode in episodes for branch in episode]
    if len(branches) > group.rows:
        setting = "default" if episodes_per_prompt is None else str(episodes_per_prompt)
        msg = (
            f"{len(episodes)} episodes of one prompt left {len(branches)} branches, but TRL "
            f"gives that prompt {group.rows} rows (num_generations={group.num_generations}): "
            f"lower AgentRollout's episodes_per_prompt ({setting}: one episode per row) so "
            "that every episode's branches fit, or raise num_generations"
        )
        raise TooManyBranches(msg)
    return [*branches, *([None] * (group.rows - len(branches)))]


def rollout_output(rows: Sequence[Branch | None], pad_token_id: int) -> dict[str, list[Any]]:
    """What rollout_func returns: TRL's three lists, `env_mask` (1 on the sampled tokens), the
    episode's reward per row (None for an inert row) and its session id."""
    output: dict[str, list[Any]] = {
        "prompt_ids": [],
        "completion_ids": [],
        "logprobs": [],
        "env_mask": [],
        REWARD_FIELD: [],
        SESSION_FIELD: [],
    }
    for row in rows:
        # A branch without a sampled token (an empty reply) trains nothing either.
        if row is None or not any(row.completion_mask):
            values: tuple[Any, ...] = ([pad_token_id], [pad_token_id], [0.0], [0], None, None)
        else:
            values = (
                row.prompt_ids,
                row.completion_ids,
                row.completion_logprobs,
                row.completion_mask,
                row.reward,
                row.session_id,
            )
        for key, value in zip(output, values, strict=True):
            output[key].append(value)
    return output
