"""An episode's branches as TRL and verl take them: the first call's prompt, then everything
after it with the mask on the sampled tokens, the recorded logprobs and versions, and each
branch's own discounted reward."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from rltap.config import EpisodeConfig
from rltap.rollout.branches import AllEpisodesFailed, episode_branches, require_branches
from rltap.rollout.workflow import Episode, OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing.proxy import RunningProxy


class ForkingAgent:
    """One question, then `forks` follow-ups that each continue the first reply; the last
    follow-up is rewarded 1, the others 0 (by interaction id)."""

    def __init__(self, forks: int) -> None:
        self.forks = forks

    async def run(self, data: dict[str, Any], **kwargs: Any) -> dict[str, float]:
        client = openai.AsyncOpenAI(max_retries=0, **kwargs)
        first = [{"role": "user", "content": data["question"]}]
        reply = await client.chat.completions.create(model="tiny", messages=first)  # type: ignore[arg-type]
        said = {"role": "assistant", "content": reply.choices[0].message.content}
        rewards = {}
        for fork in range(self.forks):
            follow = [*first, said, {"role": "user", "content": f"and {fork}?"}]
            answer = await client.chat.completions.create(model="tiny", messages=follow)  # type: ignore[arg-type]
            rewards[answer.id] = float(fork == self.forks - 1)
        return rewards


async def run(proxy: RunningProxy, agent: Any, data: dict[str, Any]) -> Episode:
    settings = WorkflowSettings(episodes=EpisodeConfig(discount=0.5))
    workflow = OpenAIProxyWorkflow(
        agent, proxy_addr=proxy.url, admin_key=proxy.admin_key, settings=settings
    )
    try:
        return await workflow.run_episode(data)
    finally:
        await workflow.aclose()


async def test_a_two_call_episode_is_one_branch_split_at_the_first_generated_token(
    proxy: RunningProxy,
) -> None:
    episode = await run(proxy, ForkingAgent(forks=1), {"question": "2+2?"})
    assert episode.interactions is not None
    [branch] = episode_branches(episode)
    first, second = episode.interactions.values()
    assert first.model_response is not None
    assert second.model_response is not None
    assert branch.prompt_ids == first.model_response.input_tokens
    assert branch.interaction_ids == [first.interaction_id, second.interaction_id]
    # Everything after the prompt: the first reply (sampled), the second call's new prompt
    # tokens (not sampled), the second reply (sampled).
    whole = branch.prompt_ids + branch.completion_ids
    assert whole[: len(second.model_response.input_tokens)] == second.model_response.input_tokens
    assert whole[len(second.model_response.input_tokens) :] == second.model_response.output_tokens
    first_out = len(first.model_response.output_tokens)
    new_prompt = len(second.model_response.input_tokens) - len(branch.prompt_ids) - first_out
    assert branch.completion_mask == (
        [1] * first_out + [0] * new_prompt + [1] * len(second.model_response.output_tokens)
    )
    sampled = [
        lp for lp, m in zip(branch.completion_logprobs, branch.completion_mask, strict=True) if m
    ]
    recorded = first.model_response.output_logprobs + second.model_response.output_logprobs
    assert sampled == pytest.approx(recorded)
    assert all(
        lp == 0.0
        for lp, m in zip(branch.completion_logprobs, branch.completion_mask, strict=True)
        if not m
    )
    assert branch.sampled_versions == [0] * (first_out + len(second.model_response.output_tokens))
    assert branch.reward == 1.0
    assert branch.session_id == episode.session_id


async def test_siblings_are_branches_of_their_own_each_with_its_own_reward(
    proxy: RunningProxy,
) -> None:
    episode = await run(proxy, ForkingAgent(forks=2), {"question": "2+2?"})
    zero, one = episode_branches(episode)
    assert zero.prompt_ids == one.prompt_ids  # both start at the first call's prompt
    assert zero.interaction_ids[0] == one.interaction_ids[0]
    assert zero.interaction_ids[1] != one.interaction_ids[1]
    assert (zero.reward, one.reward) == (0.0, 1.0)  # no leak between siblings


async def test_episodes_that_all_failed_raise_with_the_agents_errors(proxy: RunningProxy) -> None:
    class Broken:
        async def run(self, data: dict[str, Any], **kwargs: Any) -> float:
            raise RuntimeError("no tools today")

    episodes = [await run(proxy, Broken(), {}) for _ in range(2)]
    assert [episode_branches(e) for e in episodes] == [[], []]
    with pytest.raises(AllEpisodesFailed, match=r"all 2 episodes failed.*no tools today"):
        require_branches(episodes)
    good = await run(proxy, ForkingAgent(forks=1), {"question": "q"})
    require_branches([*episodes, good])  # one episode with a branch is enough
