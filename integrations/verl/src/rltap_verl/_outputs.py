"""An episode's branches as verl's `AgentLoopOutput`s, and the inert output of a failed one.

Each branch (`rltap.rollout.branches.Branch`: the prompt of its first call, then everything
after it with a mask on the sampled tokens) is one output, laid out as verl's own multi-turn
loops lay theirs out: `response_mask` 1 on the tokens the policy sampled, 0 on tool results and
later prompts; `response_logprobs` the recorded logprobs (0.0 where the mask is 0).

`reward_score` is the branch's own discounted reward. verl's V1 worker (`AgentLoopWorkerTQ`)
copies the last output's `reward_score` onto the others of the same run before it stores them,
so each output also keeps its reward in `extra_fields["rltap_reward"]`, which verl leaves alone.
The other extra fields: `rltap_session_id`, `rltap_interaction_ids` (the calls the branch is
made of), `rltap_versions` (the policy version of each sampled token: verl's `global_steps`),
`min_global_steps` / `max_global_steps` (verl's staleness tags), and `reward_extra_info` (empty:
the V1 worker reads the last output's).
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

from rltap.rollout.branches import Branch

__all__ = ["branch_output", "inert_output"]


def branch_output(branch: Branch, *, seconds: float) -> AgentLoopOutput:
    """verl's output for `branch`; `seconds` is the episode's time (verl's generation metric)."""
    versions = branch.sampled_versions
    extra: dict[str, Any] = {
        "rltap_reward": branch.reward,
        "rltap_session_id": branch.session_id,
        "rltap_interaction_ids": list(branch.interaction_ids),
        "rltap_versions": versions,
        "min_global_steps": min(versions) if versions else None,
        "max_global_steps": max(versions) if versions else None,
        "reward_extra_info": {},
    }
    return AgentLoopOutput(
        prompt_ids=list(branch.prompt_ids),
        response_ids=list(branch.completion_ids),
        response_mask=list(branch.completion_mask),
        response_logprobs=list(branch.completion_logprobs),
        reward_score=branch.reward,
        # verl counts messages; a branch knows its calls: each one a prompt and a reply.
        num_turns=2 * len(branch.interaction_ids),
        metrics=AgentLoopMetrics(generate_sequences=seconds),
        extra_fields=extra,
    )


def inert_output(
    *, pad_token_id: int, error: str, version: int, session_id: str | None
) -> AgentLoopOutput:
    """The output of a failed episode: a one-token prompt and a one-token response, masked
    out (nothing to learn from), reward 0, the failure in `extra_fields["rltap_error"]`."""
    extra: dict[str, Any] = {
        "rltap_reward": 0.0,
        "rltap_session_id": session_id,
        "rltap_interaction_ids": [],
        "rltap_versions": [],
        "rltap_error": error,
        # Stamped with the current weights, so verl's staleness filter keeps it like any other.
        "min_global_steps": version,
        "max_global_steps": version,
        "reward_extra_info": {},
    }
    return AgentLoopOutput(
        prompt_ids=[pad_token_id],
        response_ids=[pad_token_id],
        response_mask=[0],
        response_logprobs=[0.0],
        reward_score=0.0,
        num_turns=0,
        metrics=AgentLoopMetrics(),
        extra_fields=extra,
    )
