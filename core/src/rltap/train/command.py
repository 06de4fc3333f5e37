"""`rltap train` over its trainer ranks: where each rank comes from and what it runs.

`train_command` runs one rank here (`--nproc-per-node 1`, or under a launcher such as torchrun,
which started this process), or starts `--nproc-per-node` of them on this machine with torch's
elastic launcher (`rltap.train.launcher`, their output in `RUN/ranks/`), or with `--ray` as Ray
Train workers on the cluster (`rltap.train.ray_ranks`); then prints the run's table. Every rank
runs `lead_or_follow`: rank 0 the loop (`rltap.train.loop.run_training`), the others follow its
trainer (`follow_training`). A rank that fails fails the command (exit 1), naming it.
`print_run` is the table `rltap train` (and `rltap demo`) ends with.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rltap.config import TrainConfig
from rltap.record.errors import RltapError
from rltap.train.distributed import Ranks
from rltap.train.launcher import RankFailed, launch, process_group
from rltap.train.loop import TrainingFailed, TrainSummary, follow_training, run_training
from rltap.train.ray_ranks import train_on_ray
from rltap.train.run_dir import RunDir

__all__ = [
    "RANK_LOGS",
    "lead_or_follow",
    "print_run",
    "rank_command",
    "train_command",
    "train_rank",
    "train_table",
]

# Where `--nproc-per-node`'s ranks keep their output, in the run folder.
RANK_LOGS = "ranks"


def train_command(config: TrainConfig) -> int:
    """`rltap train`: the loop in each trainer rank (`--nproc-per-node` of them, launched here
    unless a launcher such as torchrun started this process), then the table of its steps and
    where its files are. With `--ray` the ranks are Ray Train workers on the cluster
    (`rltap.train.ray_ranks`)."""
    nproc = config.ranks.nproc_per_node
    if nproc == 1 or "TORCHELASTIC_RUN_ID" in os.environ:
        return rank_command(config)
    try:
        if config.ray.ray is None:
            return launch(rank_command, (config,), nproc, log_dir=Path(config.out) / RANK_LOGS)[0]
        train_on_ray(config, train_rank)
    except RankFailed as exc:
        Console(stderr=True).print(f"[red]rltap train: {exc}")
        return 1
    print_run(Console(), Path(config.out))
    return 0


def rank_command(config: TrainConfig) -> int:
    """One trainer rank of `rltap train` (the only one at world size 1); rank 0 ends with the
    run's table."""
    try:
        summary = lead_or_follow(config)
    except TrainingFailed as exc:
        Console(stderr=True).print(f"[red]rltap train: {exc}")
        return 1
    if summary is not None:
        print_run(Console(), Path(summary.run_dir))
    return 0


def train_rank(config: TrainConfig) -> None:
    """One trainer rank on a Ray Train worker: a failure is raised, for the driver to report."""
    lead_or_follow(config, ray_worker=True)


def lead_or_follow(config: TrainConfig, *, ray_worker: bool = False) -> TrainSummary | None:
    """This process as a rank of the run: rank 0 runs the loop (its summary), the others follow
    its trainer (None). `ray_worker`: Ray Train started it (`--ray`'s own ranks)."""
    from transformers.utils import logging as transformers_logging

    # save_pretrained draws a "Writing model shards" bar at every checkpoint and vLLM sync push.
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    with process_group(config.ranks.dist_backend, config.ranks.rank_timeout) as ranks:
        if ranks.world > 1 and not ray_worker:
            _check_sharded(config, ranks)
        if ranks.rank > 0:
            follow_training(config)
            return None
        return asyncio.run(run_training(config, Console(stderr=True), ranks))


def _check_sharded(config: TrainConfig, ranks: Ranks) -> None:
    """What ranks another launcher started (torchrun's) cannot do: --ray, whose ranks are Ray
    Train's (`rltap train --ray --nproc-per-node N`, `rltap.train.ray_ranks`)."""
    if config.ray.ray is not None:
        msg = (
            f"rltap train on {ranks.world} ranks of another launcher: --ray runs its trainer "
            "ranks itself, as Ray Train workers: rltap train --ray --nproc-per-node N"
        )
        raise RltapError(msg)


def train_table(run: RunDir) -> Table:
    """The run's steps: reward, KL, entropy, tokens and where the time went."""
    table = Table(title=f"rltap train: {run.path}")
    rows = run.metrics()
    evaluated = any("eval_reward" in m for m in rows)
    columns = ("step", "reward", "std", *(("eval",) if evaluated else ()), "kl", "entropy")
    for column in (*columns, "tokens", "stale", "rollout s", "train s", "sync s"):
        table.add_column(column, justify="right")
    for m in rows:
        score = (f"{m['eval_reward']:.3f}" if "eval_reward" in m else "",) if evaluated else ()
        if m["step"] == 0:  # the held-out evaluation before the first update only
            table.add_row("0", "", "", *score, *[""] * 7)
            continue
        table.add_row(
            str(m["step"]), f"{m['reward_mean']:.3f}", f"{m['reward_std']:.3f}", *score,
            f"{m['kl']:.4f}", f"{m['entropy']:.2f}", f"{m['tokens']:.0f}",
            f"{m['stale_tokens']:.0f}", f"{m['rollout_seconds']:.1f}",
            f"{m['train_seconds']:.1f}", f"{m['sync_seconds']:.2f}",
        )  # fmt: skip
    return table


def print_run(
    out: Console,
    run_dir: Path,
    *,
    label: str = "run files",
    shown: Callable[[Path], str] = str,
) -> None:
    """The run's train table and where its files are: what `rltap train` and `rltap demo` end
    with (`shown` formats the folder, e.g. relative to the working directory)."""
    with RunDir(run_dir) as run:
        out.print(train_table(run))
        last = run.last_checkpoint()
        checkpoint = f", {last.path.name}/" if last else ""
        files = f"metrics.jsonl, tensorboard/, reward.png{checkpoint}"
        out.print(f"{label}: {shown(run.path)} ({files})")
