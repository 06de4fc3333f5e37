"""A training step of two policies (a LoRA adapter per agent, issue 40) against the same step
of one LoRA policy over every agent: the same packs, the same tokens trained, side by side.

Each episode is two calls, a "writer" then a "critic" continuing it, 32 generated tokens each on
a 48-token prompt, rewarded at random (a group of `--episodes` per pack). One policy: a rank-8
adapter trains on every call's tokens (`PolicyTrainer`, as `rltap train --lora-rank 8`). Two
policies: a rank-8 adapter each, each stepping on its agent's tokens with its own AdamW
(`PolicyTrainers`, as `rltap train --policy writer=writer:8 --policy critic=critic:8`): a
forward and backward per policy over the packs that hold its tokens. The runs alternate,
`--repeats` steps each after a warm-up step; printed: the median seconds per step and their
ratio.

Measured (2026-12-05, fp32, 1 torch thread, 2 CPU cores shared with a training bench), seconds
per step, one policy / two policies:

    SmolLM2-135M-Instruct (--repeats 3)    13.47 / 24.50 = 1.82
    the tiny test model (--repeats 5)       4.61 /  3.75 = 0.81

Two policies cost up to a forward and backward each over the packs (their calls share the
packs' sequences: a critic's prompt is the writer's whole call), where one policy runs one;
on the tiny model, whose step is mostly the 151,936-word output layer over the tokens trained,
each policy's pass covers half the tokens. Printed by

    .venv/bin/python bench/policy_steps.py [--model FOLDER] [--episodes 4] [--packs 2]
        [--repeats 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from rltap.config import LoraConfig, UpdateConfig
from rltap.config.policies import PolicyConfig
from rltap.record.pack import TreePack, pack_interactions
from rltap.testing.models import cached_tiny_model_dir
from rltap.testing.packs import recorded_call
from rltap.train.lora import lora_model
from rltap.train.policies import PolicyTrainers, policy_model
from rltap.train.trainer import PolicyTrainer

AGENTS = ("writer", "critic")


def packs(count: int, episodes: int, seed: int) -> list[TreePack]:
    """`count` packs of `episodes` writer-then-critic episodes each, their calls' policies
    named after their agents."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        prompt = [rng.randrange(100, 5000) for _ in range(48)]
        calls, policies = [], []
        for _ in range(episodes):
            writer = recorded_call(prompt, [rng.randrange(100, 5000) for _ in range(32)])
            critic = recorded_call([11, 12], [rng.randrange(100, 5000) for _ in range(32)], writer)
            calls += [writer, critic]
            policies += list(AGENTS)
        rewards = {call.interaction_id: rng.random() for call in calls}
        pack = pack_interactions(calls, rewards)
        by_id = dict(zip((c.interaction_id for c in calls), policies, strict=True))
        pack.interaction_policies = [by_id[i] for i in pack.interaction_ids]
        out.append(pack)
    return out


def one_policy(model_dir: str) -> Any:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    model = lora_model(base, LoraConfig(lora_rank=8), base=model_dir)
    trainer = PolicyTrainer(model, UpdateConfig(lr=1e-4))
    return lambda batch, version: trainer.step(batch, version=version)


def two_policies(model_dir: str) -> Any:
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    policies = {name: PolicyConfig(agents=(name,), lora_rank=8) for name in AGENTS}
    model = policy_model(base, policies, LoraConfig(), base=model_dir)
    trainers = PolicyTrainers(model, policies, UpdateConfig(lr=1e-4))
    return lambda batch, version: trainers.step(batch, TreePack.policy_mask)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model folder (default: the tiny test model)")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--packs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model_dir = args.model or str(cached_tiny_model_dir())
    steppers = {
        "one policy (rank 8)": one_policy(model_dir),
        "two policies": two_policies(model_dir),
    }
    seconds: dict[str, list[float]] = {name: [] for name in steppers}
    for repeat in range(args.repeats + 1):  # the first step warms up: not counted
        batch = packs(args.packs, args.episodes, seed=repeat)
        for name, step in steppers.items():
            started = time.perf_counter()
            step(batch, 0)
            if repeat:
                seconds[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    first = next(iter(medians.values()))
    table = Table(title=f"a training step, {model_dir}")
    for column in ("run", "seconds per step (median)", "ratio"):
        table.add_column(column)
    for name, median in medians.items():
        table.add_row(name, f"{median:.3f}", f"{median / first:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
