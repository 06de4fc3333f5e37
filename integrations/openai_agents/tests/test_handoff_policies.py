"""examples/openai_agents_handoff trained by `rltap train` with two policies on the tiny model:
the triage agent's LoRA adapter and the specialists' own. The triage agent's first call must be
a handoff (`tool_choice="required"`), which the transformers engine decodes under the grammar of
the handoff tools, so even the random tiny model hands every question over.

After two steps: both adapters changed (their LoRA B matrices start at zero), both policies'
versions moved, in the metrics and on each agent's generated tokens, and each specialist's call
is the `handoff` child of the triage call, which the tree credits with the specialist's reward
times the turn discount.

About 40 s on two shared cores. Not marked `slow`: this package's pytest configuration registers
no such marker (`--strict-markers`), and its nox session runs every test anyway.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from rltap.cli.commands import main
from rltap.rollout.workflow import load_object
from rltap.testing import cached_tiny_model_dir

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "openai_agents_handoff"
DISCOUNT = 0.9  # train.toml's
POLICIES = {"triage": {"Triage"}, "specialists": {"Math Specialist", "Text Specialist"}}
HANDOFF_CREDIT = 0.3  # agent.py's reward for ending with the right specialist


def trajectories(run: Path, step: int) -> list[dict[str, Any]]:
    lines = (run / "rollouts" / f"step-{step}" / "trajectories.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def versions_by_policy(lines: list[dict[str, Any]]) -> dict[str, set[int]]:
    """The versions of each policy's generated tokens, checking each line's agent is its."""
    seen: dict[str, set[int]] = defaultdict(set)
    for line in lines:
        assert line["agent_id"] in POLICIES[line["policy"]]
        generated = [v for v, m in zip(line["versions"], line["loss_mask"], strict=True) if m]
        seen[line["policy"]].update(generated)
    return dict(seen)


def handoff_tool(agent: str) -> str:
    """The SDK's name for the tool that hands over to `agent`."""
    return "transfer_to_" + agent.lower().replace(" ", "_")


def lora_b(run: Path, step: int, policy: str) -> dict[str, torch.Tensor]:
    tensors = load_file(run / f"step-{step}" / policy / "adapter_model.safetensors")
    return {name: tensor for name, tensor in tensors.items() if "lora_B" in name}


def test_triage_and_specialists_train_their_own_adapters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    args = [
        "train", f"{EXAMPLE / 'agent.py'}:Agent", "--config", str(EXAMPLE / "train.toml"),
        "--data", str(EXAMPLE / "data.jsonl"), "--model", str(cached_tiny_model_dir()),
        "--out", str(run), "--steps", "2", "--seed", "3",
    ]  # fmt: skip
    assert main(args) == 0
    out = " ".join(capsys.readouterr().err.split())
    assert "triage: agents 'Triage' (LoRA rank 8" in out
    assert "specialists: agents 'Math Specialist', 'Text Specialist' (LoRA rank 8" in out

    # Both adapters moved off their start (B = 0) in step 1, and on in step 2 (AdamW moves
    # them on its momentum even where a step's groups carry no signal).
    for policy in POLICIES:
        first, second = lora_b(run, 1, policy), lora_b(run, 2, policy)
        assert first
        assert first.keys() == second.keys()
        assert any(tensor.abs().max() > 0 for tensor in first.values()), policy
        assert any(not torch.equal(first[name], second[name]) for name in first), policy

    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for policy in POLICIES:
        assert [line[f"{policy}/version"] for line in metrics] == [1, 2]
        assert all(line[f"{policy}/tokens"] > 0 for line in metrics)
    # Step 1 generated with both adapters at version 0, step 2 with both at version 1.
    steps = {step: trajectories(run, step) for step in (1, 2)}
    assert versions_by_policy(steps[1]) == {"triage": {0}, "specialists": {0}}
    assert versions_by_policy(steps[2]) == {"triage": {1}, "specialists": {1}}

    episode_rewards: dict[tuple[int, int], set[float]] = defaultdict(set)
    for step, lines in steps.items():
        episodes: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for line in lines:
            episodes[line["session"]].append(line)
        for calls in episodes.values():
            triage, specialist, *rest = calls
            # The triage call wrote one handoff, under the grammar of the handoff tools.
            ((call,),) = [m["tool_calls"] for m in triage["output_message_list"]]
            assert call["function"]["name"] == handoff_tool(specialist["agent_id"])
            assert triage["constrained"]
            assert (triage["link"], triage["parent_id"]) == ("root", None)
            assert specialist["link"] == "handoff"
            assert specialist["parent_id"] == triage["interaction_id"]
            # Only the final reply is rewarded (the episode's reward); each link up the chain
            # discounts it once: the triage call gets DISCOUNT * the specialist's first call's.
            final = (rest or [specialist])[-1]
            assert round(final["reward"], 6) in {0.0, HANDOFF_CREDIT, 1.0}
            assert specialist["reward"] == pytest.approx(DISCOUNT ** len(rest) * final["reward"])
            assert triage["reward"] == pytest.approx(DISCOUNT * specialist["reward"])
            episode_rewards[(step, triage["row"])].add(round(final["reward"], 6))
    # A specialist's handoff credit reached a triage call, and some row's episodes differed (a
    # group with a real signal, beyond the discount's difference between a call and its child).
    triage_rewards = [line["reward"] for line in steps[1] + steps[2] if line["policy"] == "triage"]
    assert pytest.approx(DISCOUNT * HANDOFF_CREDIT) in triage_rewards
    assert any(len(rewards) > 1 for rewards in episode_rewards.values())


class _Result:
    def __init__(self, final_output: str, last_agent: str) -> None:
        self.final_output = final_output
        self.last_agent = SimpleNamespace(name=last_agent)


@pytest.mark.parametrize(
    ("final_output", "last_agent", "expected"),
    [
        pytest.param("12 * 7 = 84.", "Text Specialist", 1.0, id="right-number"),
        pytest.param("It is 85", "Math Specialist", HANDOFF_CREDIT, id="right-specialist"),
        pytest.param("84 or 85", "Text Specialist", 0.0, id="neither"),
        pytest.param("no number", "Triage", 0.0, id="no-handoff"),
    ],
)
def test_reward_is_the_answer_else_the_handoff_credit(
    final_output: str, last_agent: str, expected: float
) -> None:
    reward = load_object(f"{EXAMPLE / 'agent.py'}:reward")
    row = {"question": "What is 12 * 7?", "answer": "84", "specialist": "Math Specialist"}
    assert reward(_Result(final_output, last_agent), row) == expected


def test_data_rows_name_a_specialist_of_the_agent() -> None:
    lines = (EXAMPLE / "data.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert {row["specialist"] for row in rows} == POLICIES["specialists"]
    assert all(set(row) == {"question", "answer", "specialist"} for row in rows)
