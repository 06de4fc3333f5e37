"""TRL's own GRPOTrainer trains the tiny model on a LangChain agent's episodes through rltap.

Two steps on CPU in fp32: the weights move, the reward TRL logs is the mean of what the agent
returned, and the recorded logprobs are TRL's: on the ids rltap returned and the weights that
sampled them, TRL's recomputation (`trl.trainer.utils.selective_log_softmax` over the model's
logits / temperature, its fp32 path as GRPOTrainer runs it) is within 5e-5 of every recorded
logprob of a sampled token, and torch.log_softmax of the same logits (the formula the engine
records) within 1e-5. The gap between the two bounds is TRL's own rounding: in fp32 its function
computes x_i - logsumexp(x) over 151,936 logits, which on the tiny model (logprobs down to -26)
is up to ~3e-5 away from log_softmax of the very same logits.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import make_trainer, prompt_dataset
from trl.trainer.utils import selective_log_softmax
from trl_agents import SHORT, build_calculator_agent, calculator_reward

from rltap_langchain import LangChainAdapter
from rltap_trl import REWARD_FIELD, AgentRollout

FIDELITY = 1e-5  # fp32 (DESIGN.md's token fidelity invariant)
TRL_FP32_ROUNDING = 5e-5  # TRL's fp32 path on the tiny model's logits (module docstring)


def diffs_to_trl(trainer: Any, output: dict[str, list[Any]], row: int) -> tuple[float, float, int]:
    """Row `row`'s largest |recorded - recomputed| logprob over its sampled tokens, recomputed
    by torch.log_softmax and by TRL's selective_log_softmax, and how many sampled tokens it has."""
    prompt, completion = output["prompt_ids"][row], output["completion_ids"][row]
    model = trainer.accelerator.unwrap_model(trainer.model)
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, len(prompt) - 1 : -1, :]
    logits = logits / trainer.args.temperature
    completion_ids = ids[:, len(prompt) :]
    sampled = torch.tensor(output["env_mask"][row]).bool()
    recorded = torch.tensor(output["logprobs"][row])
    torch_logprobs = torch.log_softmax(logits, -1).gather(-1, completion_ids[..., None])[0, :, 0]
    trl_logprobs = selective_log_softmax(logits, completion_ids)[0]
    found = [
        float((ours - recorded).abs()[sampled].max()) for ours in (torch_logprobs, trl_logprobs)
    ]
    return found[0], found[1], int(sampled.sum())


class ObservedRollout:
    """The rollout as TRL calls it, recording per call what the agent's reward function
    returned and how far the recorded logprobs are from TRL's recomputation (right after the
    rollout: the weights that sampled them)."""

    def __init__(self) -> None:
        self.returned: list[float] = []
        self.calls: list[dict[str, Any]] = []
        agent = LangChainAdapter(
            build_calculator_agent, reward_fn=self.reward, chat_kwargs=dict(SHORT)
        )
        self.rollout = AgentRollout(agent)

    def reward(self, result: Any, data: Any) -> float:
        value = calculator_reward(result, data)
        self.returned.append(value)
        return value

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        self.returned.clear()
        output = self.rollout(prompts, trainer)
        diffs = [diffs_to_trl(trainer, output, row) for row in range(len(prompts))]
        self.calls.append(
            {
                "prompts": len(prompts),
                "output": output,
                "agent_rewards": list(self.returned),
                "max_diff": max(d[0] for d in diffs),
                "max_diff_fp32": max(d[1] for d in diffs),
                "sampled": sum(d[2] for d in diffs),
            }
        )
        return output


@pytest.mark.slow
def test_grpo_trains_on_the_agents_episodes(
    tiny_model_dir: Path, rows: list[dict[str, Any]], tmp_path: Path, closing: list[Any]
) -> None:
    observed = ObservedRollout()
    closing.append(observed.rollout)
    calls = observed.calls
    trainer = make_trainer(
        tiny_model_dir, tmp_path, observed, prompt_dataset(rows), max_steps=2, learning_rate=1e-4
    )
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    head_before = before["lm_head.weight"]
    trainer.train()

    assert len(calls) == 2
    changed = [
        name
        for name, p in trainer.model.named_parameters()
        if not torch.equal(p.detach(), before[name])
    ]
    assert "lm_head.weight" in changed, changed
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(logged) == 2, trainer.state.log_history
    for call, entry in zip(calls, logged, strict=True):
        # One episode per row (num_generations=2, two prompts a step), each one branch.
        assert call["prompts"] == 4
        assert len(call["agent_rewards"]) == 4
        # rltap records rewards as float32.
        expected = pytest.approx(sorted(call["agent_rewards"]), abs=1e-6)
        assert sorted(call["output"][REWARD_FIELD]) == expected
        agent_mean = sum(call["agent_rewards"]) / 4
        assert math.isclose(entry["reward"], agent_mean, abs_tol=1e-6), (entry, call)
        assert call["max_diff"] <= FIDELITY, call["max_diff"]
        assert call["max_diff_fp32"] <= TRL_FP32_ROUNDING, call["max_diff_fp32"]
        assert call["sampled"] > 0
    # GRPO had something to learn from: rewards differed within a group at least once.
    assert any(entry["frac_reward_zero_std"] < 1.0 for entry in logged), logged
    print(
        f"logprob max diff: TRL's selective_log_softmax "
        f"{max(c['max_diff_fp32'] for c in calls):.2e}, torch.log_softmax "
        f"{max(c['max_diff'] for c in calls):.2e}, over "
        f"{sum(c['sampled'] for c in calls)} sampled tokens; rewards "
        f"{[c['agent_rewards'] for c in calls]} vs logged {[e['reward'] for e in logged]}; "
        f"weights changed: {len(changed)} of {len(before)} tensors, lm_head max "
        f"{float((trainer.model.lm_head.weight.detach() - head_before).abs().max()):.2e}"
    )
