"""The agent loop built as verl builds it, an rltap agent's episode in, verl's outputs out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import (
    GLOBAL_STEPS,
    REPO,
    LoopBuilder,
    TinyServerManager,
    row,
    sampling_params,
    yaml_entry,
)
from omegaconf import DictConfig
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl_agents import FORKING

from rltap.rollout.workflow import Episode, OpenAIProxyWorkflow

IM_END = 151645


def spy_episodes(monkeypatch: pytest.MonkeyPatch) -> list[Episode]:
    """The episodes rltap's workflow exports during the test (the session's export)."""
    episodes: list[Episode] = []
    run_episode = OpenAIProxyWorkflow.run_episode

    async def recording(self: OpenAIProxyWorkflow, *args: Any, **kwargs: Any) -> Episode:
        episode = await run_episode(self, *args, **kwargs)
        episodes.append(episode)
        return episode

    monkeypatch.setattr(OpenAIProxyWorkflow, "run_episode", recording)
    return episodes


def check_tensors(output: AgentLoopOutput) -> None:
    """What verl's V1 worker stores of `output` (`as_dict`): the right dtypes and lengths."""
    fields = output.as_dict()
    length = len(output.response_ids)
    assert fields["prompts"].dtype == torch.int64
    assert fields["prompts"].tolist() == output.prompt_ids
    assert fields["responses"].dtype == torch.int64
    assert fields["responses"].tolist() == output.response_ids
    assert fields["response_mask"].tolist() == output.response_mask
    assert fields["rollout_log_probs"].dtype == torch.float32
    assert fields["rollout_log_probs"].shape == (length,)
    assert fields["rm_scores"].shape == (length,)
    expected = torch.zeros(length)
    expected[-1] = output.reward_score
    assert torch.equal(fields["rm_scores"], expected)


async def test_a_branching_episode_gives_one_output_per_branch_with_its_own_reward(
    build_loop: LoopBuilder,
    verl_config: DictConfig,
    server_manager: TinyServerManager,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    episodes = spy_episodes(monkeypatch)
    loop = build_loop(yaml_entry(agent="verl_agents:FORKING", discount=0.5))
    outputs = await loop.run(sampling_params(verl_config), **row(question="What is 2 + 3?"))

    [episode] = episodes
    assert episode.interactions is not None
    assert len(outputs) == 2
    given = FORKING.rewards[-1]
    for output in outputs:
        assert AgentLoopOutput.model_validate(output.model_dump()) == output
        first, leaf = output.extra_fields["rltap_interaction_ids"]
        assert first == FORKING.first_ids[-1]
        exported = episode.interactions[leaf]
        # The branch's reward is its leaf's, as the session's export gives it.
        assert output.reward_score == exported.reward == given[leaf]
        assert output.extra_fields["rltap_reward"] == output.reward_score
        assert output.extra_fields["rltap_session_id"] == episode.session_id
        # The branch is the leaf's whole sequence: the first prompt, then the rest.
        response = exported.model_response
        assert response is not None
        whole = output.prompt_ids + output.response_ids
        assert whole == response.input_tokens + response.output_tokens
        first_reply = episode.interactions[first].model_response
        assert first_reply is not None
        assert output.prompt_ids == first_reply.input_tokens
        first_out, leaf_out = len(first_reply.output_tokens), len(response.output_tokens)
        new_prompt = len(output.response_ids) - first_out - leaf_out
        assert output.response_mask == [1] * first_out + [0] * new_prompt + [1] * leaf_out
        sampled = first_reply.output_logprobs + response.output_logprobs
        masked = [
            lp for lp, m in zip(output.response_logprobs, output.response_mask, strict=True) if m
        ]
        assert masked == pytest.approx(sampled)
        assert all(
            lp == 0.0
            for lp, m in zip(output.response_logprobs, output.response_mask, strict=True)
            if not m
        )
        # Every sampled token carries verl's weight version (its global_steps).
        assert output.extra_fields["rltap_versions"] == [GLOBAL_STEPS] * (first_out + leaf_out)
        assert output.extra_fields["min_global_steps"] == GLOBAL_STEPS
        assert output.extra_fields["max_global_steps"] == GLOBAL_STEPS
        check_tensors(output)
    assert sorted(output.reward_score for output in outputs) == [0.25, 1.0]
    assert outputs[0].prompt_ids == outputs[1].prompt_ids


async def test_every_call_goes_through_verls_server_manager_with_verls_temperature(
    build_loop: LoopBuilder, verl_config: DictConfig, server_manager: TinyServerManager
) -> None:
    loop = build_loop(yaml_entry(agent="verl_agents:FORKING"))
    validating = sampling_params(verl_config, validate=True)
    assert validating["temperature"] == 0  # verl validates greedily
    await loop.run(validating, **row(question="2+2?"))
    assert len(server_manager.calls) == 3
    request_ids = {request_id for request_id, _ in server_manager.calls}
    assert len(request_ids) == 1  # one session: verl keeps it on one replica
    for _, params in server_manager.calls:
        assert params["temperature"] == 0.0  # the agent asked for none: verl's applies
        assert params["logprobs"] is True
        assert params["max_tokens"] == 8
        assert params["top_k"] == -1
        assert IM_END in params["stop_token_ids"]


async def test_the_worker_shares_one_proxy_and_closes_it(
    build_loop: LoopBuilder, verl_config: DictConfig
) -> None:
    import httpx

    from rltap_verl import close_worker_proxies

    for question in ("1+1?", "2+2?"):
        loop = build_loop(yaml_entry(agent="verl_agents:FORKING"))  # verl builds one per sample
        await loop.run(sampling_params(verl_config), **row(question=question))
    first, second = FORKING.base_urls[-2:]
    assert first == second
    await close_worker_proxies()
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(first + "/models")


async def test_the_langchain_math_agent_trains_through_verl(
    build_loop: LoopBuilder, verl_config: DictConfig, verl_tokenizer: Any
) -> None:
    agent = f"{REPO / 'examples' / 'langchain_math' / 'agent.py'}:Agent"
    loop = build_loop(yaml_entry(agent=agent, agent_kwargs={"chat_kwargs": {"max_tokens": 12}}))
    outputs = await loop.run(
        sampling_params(verl_config), **row(question="What is 6 * 7?", answer="42")
    )
    assert outputs
    for output in outputs:
        assert AgentLoopOutput.model_validate(output.model_dump()) == output
        prompt = verl_tokenizer.decode(output.prompt_ids)
        assert "What is 6 * 7?" in prompt
        assert "calculator" in prompt  # the chain's tool, rendered by verl's tokenizer
        assert output.reward_score in (0.0, 1.0)  # exact match of the tiny model's reply
        assert 1 in output.response_mask
        assert "rltap_error" not in output.extra_fields
        check_tensors(output)


def test_the_yaml_entry_names_the_plugin_and_documents_every_setting() -> None:
    from dataclasses import fields

    from rltap_verl import RltapSettings

    entry = yaml_entry()
    assert entry.name == "rltap_agent"
    assert entry._target_ == "rltap_verl.RltapAgentLoop"
    assert sorted(entry.rltap) == sorted(f.name for f in fields(RltapSettings))
    text = (Path(REPO) / "integrations" / "verl" / "rltap_agent.yaml").read_text()
    assert "trainer.use_v1=True" in text
