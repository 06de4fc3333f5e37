"""The rows AgentRollout hands TRL: shapes and masks, branching episodes, inert rows."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from conftest import repeated
from trl_agents import calculator_agent, one_call_agent, two_branch_agent

from rltap_trl import REWARD_FIELD, SESSION_FIELD, AgentRollout, TooManyBranches
from rltap_trl._rows import PromptGroup, episodes_in_group, prompt_groups

ROWS = [{"question": "What is 2+3?", "answer": "5"}, {"question": "What is 4*5?", "answer": "20"}]


def run(trainer: Any, closing: list[Any], agent: Any, prompts: list[Any], **options: Any) -> Any:
    rollout = AgentRollout(agent, **options)
    closing.append(rollout)
    return rollout, rollout(prompts, trainer)


def test_a_two_call_episode_is_one_row_masked_on_what_the_policy_sampled(
    trainer: Any, closing: list[Any]
) -> None:
    rollout, output = run(trainer, closing, calculator_agent(), repeated(ROWS))
    assert len(output["prompt_ids"]) == 4
    tokenizer = trainer.processing_class
    for row in range(4):
        prompt, completion = output["prompt_ids"][row], output["completion_ids"][row]
        mask, logprobs = output["env_mask"][row], output["logprobs"][row]
        assert len(completion) == len(mask) == len(logprobs)
        # The first call's prompt, then: its reply (1), the tool result and the second
        # call's new prompt tokens (0), the second reply (1).
        assert "<|im_start|>user\nWhat is" in tokenizer.decode(prompt)
        runs = [mask[0]] + [b for a, b in itertools.pairwise(mask) if a != b]
        assert runs == [1, 0, 1], mask
        masked = tokenizer.decode([t for t, m in zip(completion, mask, strict=True) if not m])
        assert "<tool_response>" in masked
        assert all(lp < 0 for lp, m in zip(logprobs, mask, strict=True) if m)
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
        assert output[REWARD_FIELD][row] is not None
        branch = rollout.last_rows[row]
        assert branch is not None
        assert output[SESSION_FIELD][row] == branch.session_id
        assert len(branch.interaction_ids) == 2
    # Each row its own episode: four sessions.
    assert len(set(output[SESSION_FIELD])) == 4


def test_a_branching_episode_fills_its_groups_rows(trainer: Any, closing: list[Any]) -> None:
    rollout, output = run(
        trainer, closing, two_branch_agent(), repeated(ROWS), episodes_per_prompt=1
    )
    sessions = output[SESSION_FIELD]
    # One episode per prompt, two branches (two independent calls): its group's two rows.
    assert sessions[0] == sessions[1] != sessions[2] == sessions[3]
    assert all(len(branch.interaction_ids) == 1 for branch in rollout.last_rows)
    assert all(all(mask) for mask in output["env_mask"])
    # The reward sits on the call that completed last; the other branch's is 0 (discounting).
    for group in (output[REWARD_FIELD][:2], output[REWARD_FIELD][2:]):
        assert sorted(group) == [0.0, 1.0]


def test_branches_beyond_a_groups_rows_are_refused(trainer: Any, closing: list[Any]) -> None:
    with pytest.raises(TooManyBranches, match="lower AgentRollout's episodes_per_prompt"):
        run(trainer, closing, two_branch_agent(), repeated(ROWS))


def test_rows_without_an_episode_are_inert(trainer: Any, closing: list[Any]) -> None:
    failing = {"question": "fail", "answer": "0", "fail": True}
    prompts = repeated([ROWS[0], failing])
    rollout, output = run(trainer, closing, one_call_agent(), prompts, episodes_per_prompt=1)
    pad = trainer.processing_class.pad_token_id
    # Row 1: the first group's second row (one episode for two rows); rows 2-3: the failing
    # prompt's group. An inert row trains nothing and TRL leaves it unscored.
    assert output[REWARD_FIELD] == [0.5, None, None, None]
    assert output[SESSION_FIELD][1:] == [None, None, None]
    for row in (1, 2, 3):
        assert output["prompt_ids"][row] == output["completion_ids"][row] == [pad]
        assert output["env_mask"][row] == [0]
        assert output["logprobs"][row] == [0.0]
        assert rollout.last_rows[row] is None
    assert output["env_mask"][0] == [1] * len(output["completion_ids"][0])


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        pytest.param(0, [(0, 4), (4, 8)], id="whole-groups"),
        # Process 1 of 2 with 6 rows each and num_generations 4: rows 6-11 of the batch.
        pytest.param(6, [(0, 2), (2, 6)], id="group-cut-between-processes"),
    ],
)
def test_groups_follow_trls_batch_layout(offset: int, expected: list[tuple[int, int]]) -> None:
    prompts = ["a"] * 4 + ["b"] * 4 if offset == 0 else ["a"] * 2 + ["b"] * 4
    groups = prompt_groups(prompts, 4, offset)
    assert [(g.start, g.stop) for g in groups] == expected


def test_a_group_of_mixed_prompts_is_refused() -> None:
    with pytest.raises(TypeError, match="should repeat one prompt"):
        prompt_groups(["a", "b"], 2, 0)


@pytest.mark.parametrize(
    ("rows", "per_prompt", "episodes"),
    [
        pytest.param(4, None, 4, id="one-per-row"),
        pytest.param(4, 2, 2, id="setting"),
        pytest.param(2, 3, 2, id="cut-group-rounds-up"),
    ],
)
def test_episodes_per_group(rows: int, per_prompt: int | None, episodes: int) -> None:
    assert episodes_in_group(PromptGroup(0, rows, 4), per_prompt) == episodes
