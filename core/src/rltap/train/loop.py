"""`rltap train`: the RL loop closed on one machine.

Each step k (1-based; the engine starts at policy version 0, and step k trains the policy of
version k - 1 into version k):

1. rollout: `rows-per-step` dataset rows x `group-size` episodes of the agent through the
   proxy (`rltap.rollout.run_rollout`), exported as one token trie per row (style `tree`): a
   `RolloutBatch` in memory, whose files go to `RUN/rollouts/step-k/` for inspection;
2. train: `PolicyTrainer.step` on the batch's packs as the proxy exported them (advantages,
   micro-batches, the clipped loss, AdamW); tokens more than `--max-staleness` versions old are
   left out and counted;
3. sync: the new weights into the engine (`rltap.train.sync.weight_sync`), which stamps
   version k on every token it generates from then on;
4. evaluate, with `--eval-data`: every `--eval-every` steps and at the last, the held-out rows
   on the new weights (`rltap.rollout.evaluate`; greedy unless `--eval-temperature`) into
   `RUN/eval/step-k/`, as `eval_reward`, `eval_reward_std` and `eval_pass_at_1`; also before
   step 1, as step 0's line;
5. record: the step's metrics (`metrics.jsonl`, TensorBoard, `reward.png`) and, every
   `--save-every` steps and at the last, a checkpoint `RUN/step-k/`.

With `--async` the rollouts of step k + 1 start when step k's training starts, on the weights of
version k - 1 until the sync lands mid-rollout (the embedded engine swaps weights between two
decode steps; see `rltap.train.sync`): their tokens are at most one version old when trained on.

Running again on the same RUN resumes after its last checkpoint: the trainer's weights and
AdamW state are loaded, the engine gets those weights and their version, and metrics and
rollouts of later steps (a step cut short) are dropped and run again.

With `--lora-rank N` the trainer trains a LoRA adapter on the frozen --model
(`rltap.train.lora`), the sync moves only the adapter into the engine (`rltap.train.sync`),
and each checkpoint is the adapter folder (resuming loads it onto --model again).

With policies (`[policies]`, `--policy`) each policy trains its own LoRA adapter on its agents'
calls (`rltap.train.policy_leader`): the run's first lines say which policy serves which agents,
a warning after step 1 names the agents a policy names and no call carried, each sync moves the
adapters that changed at their own versions, each checkpoint holds every policy's, and the
metrics add each policy's as `<policy>/<metric>` (`reward.png` draws a line per policy).

With `--nproc-per-node N` (or under torchrun) the trainer is sharded over N ranks (FSDP2,
`rltap.train.distributed`): rank 0 runs this loop, its proxy, engine and run folder; the other
ranks follow its trainer's collectives (`rltap.train.leader`): each step's packs reach every rank
and every rank steps; at each sync and checkpoint the weights (with LoRA, the adapter) are
gathered onto rank 0 a chunk at a time (`rltap.train.gather`), which writes them for the engine
(the embedded engine keeps a full copy of its own) and into the checkpoint; every rank writes its
part of AdamW's state. A checkpoint resumes at any number of ranks. The ranks' output is kept in
`RUN/ranks/`; a rank that fails stops the run, naming it and quoting its last lines
(`rltap.train.launcher`), and running again resumes from the last checkpoint.

With `--ray` too, the N ranks are Ray Train workers on the cluster (`rltap.train.ray_ranks`:
which engine and why), rank 0's rollouts go to the rollout actors there, and `rltap train`
itself only starts or joins the cluster, waits for the ranks and prints the run's table.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress
from rich.text import Text

from rltap.config import TrainConfig
from rltap.config.policies import policy_lines, unseen_agents_warning
from rltap.record.pack import TreePack
from rltap.record.sampling import EpisodeSampling, derive_seed
from rltap.rollout.batch import RolloutSummary
from rltap.rollout.evaluate import score_rows
from rltap.rollout.progress import progress_display
from rltap.rollout.ray import ray_training
from rltap.rollout.runner import load_rows, run_rollout
from rltap.train.distributed import Ranks
from rltap.train.leader import RankLeader
from rltap.train.leaders import TrainingFailed, follow_training, run_leader
from rltap.train.memory import trim_heap
from rltap.train.policy_leader import PolicyLeader, policy_rewards, seen_agents
from rltap.train.policy_store import PolicySync
from rltap.train.run_dir import Checkpoint, RunDir
from rltap.train.shared import Hold, local_training
from rltap.train.sync import WeightSync

__all__ = [
    "TrainSummary",
    "TrainingFailed",
    "follow_training",
    "run_training",
]


@dataclass(slots=True)
class TrainSummary:
    """What a `rltap train` call did: steps run (after resuming), the reward per step."""

    run_dir: str
    first_step: int
    last_step: int
    rewards: list[float] = field(default_factory=list)


@dataclass(slots=True)
class _Rollout:
    """A step's rollout: its packs in memory, what the trainer steps on (its lines are in the
    files only: the step holds no more than it trains on)."""

    summary: RolloutSummary
    packs: list[TreePack]
    seconds: float
    # each policy's reward (`policy_leader.policy_rewards`) and the agent ids the calls carried
    policy_metrics: dict[str, float] = field(default_factory=dict)
    agents: set[str | None] = field(default_factory=set)


class _Loop:
    """The state one `rltap train` call carries from step to step."""

    def __init__(self, config: TrainConfig, run: RunDir, leader: RankLeader | PolicyLeader) -> None:
        self.loop = config.loop
        self.run = run
        self.leader = leader
        self.policies = config.policies
        self.rows = load_rows(Path(config.data))
        self.version = 0
        self.temperature = config.update.temperature
        self.evaluation = config.evaluation
        held_out = config.evaluation.eval_data
        self.eval_rows = load_rows(Path(held_out)) if held_out else None
        # what each training step runs under: the engine paused where it shares the model
        self.exclusive: Hold = contextlib.nullcontext

    def rows_of(self, step: int) -> list[Any]:
        """Step k's rows: the dataset read in order, round and round."""
        per = self.loop.rows_per_step
        return [self.rows[((step - 1) * per + i) % len(self.rows)] for i in range(per)]

    def sampling(self, *parts: int) -> EpisodeSampling:
        """The episodes' sampling: --temperature, and a seed of their own from --seed and
        `parts` (the step), so each step samples afresh and a rerun samples the same."""
        seed = self.loop.episodes.seed
        derived = None if seed is None else derive_seed(seed, *parts)
        return EpisodeSampling(seed=derived, temperature=self.temperature)

    async def rollout(self, step: int, workflow: Any, progress: Progress) -> _Rollout:
        started = time.monotonic()
        batch = await run_rollout(
            workflow,
            self.rows_of(step),
            self.run.rollout_dir(step),
            group_size=self.loop.episodes.group_size,
            concurrency=self.loop.episodes.concurrency,
            sampling=self.sampling(step),
            progress=progress,
        )
        summary = batch.summary
        if summary.episodes_ok == 0:
            first = summary.errors[0] if summary.errors else "no episode ran"
            msg = f"step {step}: all {summary.episodes_failed} episodes failed; first: {first}"
            raise TrainingFailed(msg)
        rollout = _Rollout(summary, batch.packs, time.monotonic() - started)
        if self.policies:
            rollout.policy_metrics = policy_rewards(batch.lines, self.policies)
            rollout.agents = seen_agents(batch.lines)
        return rollout

    def evaluates(self, step: int) -> bool:
        """Whether step `step` ends with a held-out evaluation (step 0: before the first)."""
        if self.eval_rows is None:
            return False
        if step == 0:  # once per run folder, also when the run is resumed
            return all(row["step"] != 0 for row in self.run.metrics())
        return step % self.evaluation.eval_every == 0 or step == self.loop.steps

    async def evaluate(self, step: int, workflow: Any, progress: Progress) -> dict[str, float]:
        """The held-out rows on the current weights (`rltap.rollout.evaluate`), into
        `RUN/eval/step-N/`.
        Every evaluation samples with the same seeds, so their differences are the weights'."""
        assert self.eval_rows is not None
        started = time.monotonic()
        e = self.evaluation
        seed = self.loop.episodes.seed
        sampling = EpisodeSampling(
            seed=None if seed is None else derive_seed(seed, -1), temperature=e.eval_temperature
        )
        out = self.run.eval_dir(step)
        batch = await run_rollout(
            workflow,
            self.eval_rows,
            out,
            group_size=e.eval_samples,
            concurrency=self.loop.episodes.concurrency,
            sampling=sampling,
            progress=progress,
        )
        result = score_rows(
            batch.lines,
            len(self.eval_rows),
            e.eval_samples,
            temperature=e.eval_temperature,
            pass_threshold=e.passing.pass_threshold,
        )
        result.write(out)
        metrics = (
            policy_rewards(batch.lines, self.policies, prefix="eval_") if self.policies else {}
        )
        return {
            **metrics,
            "eval_reward": result.reward_mean,
            "eval_reward_std": result.reward_std,
            "eval_pass_at_1": result.pass_at_k["1"],
            "eval_seconds": time.monotonic() - started,
        }

    async def train_and_sync(
        self, step: int, rollout: _Rollout, sync: WeightSync | PolicySync
    ) -> dict[str, float]:
        started = time.monotonic()
        async with self.exclusive():
            metrics = await asyncio.to_thread(self.leader.step, rollout.packs, self.version)
        trained = time.monotonic()
        self.version += 1
        if isinstance(self.leader, PolicyLeader):
            assert isinstance(sync, PolicySync)
            metrics.update(await self.leader.push(sync), **rollout.policy_metrics)
        else:
            assert not isinstance(sync, PolicySync)
            await sync.push(await asyncio.to_thread(self.leader.weights), self.version)
        rewards = [leaf.reward for pack in rollout.packs for leaf in pack.leaves]
        metrics.update(
            reward_mean=statistics.fmean(rewards) if rewards else 0.0,
            reward_std=statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            episodes_failed=float(rollout.summary.episodes_failed),
            rollout_seconds=rollout.seconds,
            train_seconds=trained - started,
            sync_seconds=time.monotonic() - trained,
            version=float(self.version),
        )
        return metrics

    def record(self, step: int, metrics: dict[str, float], tokenizer: Any) -> None:
        self.run.log(step, metrics)
        self.run.plot_rewards()
        if step == 0:  # the evaluation before the first update: nothing to checkpoint
            return
        if step % self.loop.save_every == 0 or step == self.loop.steps:
            state = {"step": step, "version": self.version, "seed": self.loop.episodes.seed}
            self.leader.save_checkpoint(self.run, step, tokenizer, state)


async def run_training(
    config: TrainConfig, console: Console, ranks: Ranks | None = None
) -> TrainSummary:
    """The loop of the module docstring, from `rltap train`'s settings, in rank 0 of `ranks`
    (default: the process group's, if any; the other ranks run `follow_training`)."""
    ranks = ranks or Ranks.current()
    if config.loop.episodes.seed is not None:
        torch.manual_seed(config.loop.episodes.seed)
    run = RunDir(Path(config.out))
    checkpoint = run.last_checkpoint()
    if config.policies:
        for line in policy_lines(
            config.policies, lr=config.update.lr, kl_coef=config.update.kl_coef
        ):
            console.print(line, markup=False, highlight=False)
    leader = run_leader(config, checkpoint, ranks)
    try:
        return await _lead(config, console, run, checkpoint, leader)
    finally:
        leader.stop()


async def _lead(
    config: TrainConfig,
    console: Console,
    run: RunDir,
    checkpoint: Checkpoint | None,
    leader: RankLeader | PolicyLeader,
) -> TrainSummary:
    from transformers import AutoTokenizer

    steps = config.loop.steps
    run.resume_from(checkpoint)
    first = checkpoint.step + 1 if checkpoint else 1
    loop = _Loop(config, run, leader)
    loop.version = int(checkpoint.state["version"]) if checkpoint else 0
    tokenizer = AutoTokenizer.from_pretrained(config.serve.engine.tokenizer or config.model)
    summary = TrainSummary(str(run.path), first, first - 1)
    if first > steps:
        console.print(f"{run.path}: all {steps} steps are done (step-{first - 1})")
        return summary
    async with _serving(config, loop, checkpoint is not None, tokenizer) as (workflow, sync):
        with progress_display(console) as progress:
            task = progress.add_task("train steps", total=steps, completed=first - 1, live="")

            def start(step: int) -> asyncio.Task[_Rollout]:
                return asyncio.create_task(loop.rollout(step, workflow, progress))

            if loop.evaluates(0):  # the initial weights' score, as step 0
                loop.record(0, await loop.evaluate(0, workflow, progress), tokenizer)
            pending = start(first)
            for step in range(first, steps + 1):
                rollout = await pending
                ahead = config.loop.async_rollouts and step < steps
                if ahead:
                    pending = start(step + 1)
                metrics = await loop.train_and_sync(step, rollout, sync)
                if config.policies and step == first:
                    warning = unseen_agents_warning(config.policies, rollout.agents)
                    if warning:
                        console.print(Text.assemble(("warning: ", "yellow"), warning))
                if loop.evaluates(step):
                    metrics.update(await loop.evaluate(step, workflow, progress))
                loop.record(step, metrics, tokenizer)
                trim_heap()  # the step's freed memory back to the system (rltap.train.memory)
                summary.rewards.append(metrics["reward_mean"])
                summary.last_step = step
                live = f"reward {metrics['reward_mean']:+.3f} | v{loop.version}"
                progress.update(task, advance=1, live=live)
                if not ahead and step < steps:
                    pending = start(step + 1)
    run.close()
    return summary


@contextlib.asynccontextmanager
async def _serving(
    config: TrainConfig, loop: _Loop, resumed: bool, tokenizer: Any
) -> AsyncIterator[tuple[Any, WeightSync | PolicySync]]:
    """Where the run's episodes go (this process's proxy and engine, or with `--ray` the rollout
    actors of `rltap.rollout.ray`, style tree either way) and the weight sync to it; the local
    proxy renders with the run's `tokenizer` (the checkpoints' too)."""
    serving: contextlib.AbstractAsyncContextManager[tuple[Any, WeightSync | PolicySync]]
    if config.ray.ray is not None:
        serving = ray_training(config.rollout(), loop.run.sync_dir())
    else:
        serving = _local_serving(config, loop, tokenizer)
    async with serving as (episodes, sync):
        if resumed:  # the engine starts from --model: give it the checkpoint's weights
            if isinstance(loop.leader, PolicyLeader):
                assert isinstance(sync, PolicySync)
                await loop.leader.push_all(sync)
            else:
                assert not isinstance(sync, PolicySync)
                await sync.push(await asyncio.to_thread(loop.leader.weights), loop.version)
        yield episodes, sync


@contextlib.asynccontextmanager
async def _local_serving(
    config: TrainConfig, loop: _Loop, tokenizer: Any
) -> AsyncIterator[tuple[Any, WeightSync | PolicySync]]:
    model, sync_dir = loop.leader.model, loop.run.sync_dir()
    async with local_training(config, model, sync_dir, tokenizer=tokenizer) as local:
        loop.exclusive = local.exclusive
        if config.policies:  # each policy's adapter by name, at its own version
            yield local.workflow, PolicySync(local.serving.engine, sync_dir)
        else:
            yield local.workflow, local.sync
