"""`rltap rollout`: run an agent over a dataset through the proxy and write the training data.

Each row runs `group_size` episodes (one proxy session each); rows run `concurrency` at a time.
The output folder holds:

- `trajectories.jsonl`: one line per exported interaction: its place (`row`, `group`,
  `episode`, `session`), the exported interaction's fields (`rltap.record.exported`: ids, link,
  agent, discounted reward, messages, reply, lengths, stop reason) and its token columns (ids,
  loss mask, logprobs, versions);
- `rows.jsonl`: the ledger, one line per finished row, written after its trajectories;
- `batch.safetensors`: every line's tensors right-padded and stacked (the seed's tensor dict);
  with `--style tree`, one token trie per row instead (its episodes' packs as the proxy exported
  them, merged: their shared prompt once), in the keys of `rltap.record.pack_io.save_packs` (the
  lines stay one per interaction, each its own prompt and output, as style individual's);
- `summary.json`: episodes ok/failed/retried, interactions, tokens, reward mean/std, wall time.

`run_rollout` returns the same data in memory, a `RolloutBatch` (`rltap.rollout.batch`): the
files are written from it, and `rltap train` trains on its packs without reading them back. The
files' format is `rltap.rollout.files`'s. With `--ray` the episodes run on Ray rollout actors
(`rltap.rollout.ray`), each with its own engine and proxy, which hand each episode's data
(`EpisodeData`) back to this process; it writes the same files. An episode lost with its actor
runs again on another (`episodes_retried`).

Running again with the same folder resumes: rows in the ledger are skipped (their lines, and
packs rebuilt from them, are read back into the batch), and trajectory lines of rows that never
reached the ledger (an interrupted run) are dropped first, so nothing is duplicated.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

import orjson
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from rltap.config import ConfigError, RolloutConfig
from rltap.record.sampling import EpisodeSampling
from rltap.rollout.batch import EpisodeData, RolloutBatch, RolloutSummary
from rltap.rollout.files import (
    BATCH,
    LEDGER,
    SUMMARY,
    RowWriter,
    episode_data,
    load_batch,
    load_rows,
    load_trajectories,
    read_rollout,
    write_batch,
)
from rltap.rollout.progress import progress_display
from rltap.rollout.workflow import OpenAIProxyWorkflow
from rltap.store.schema import STORE_FILE
from rltap.tree.export import ExportStyle

__all__ = [
    "BATCH",
    "LEDGER",
    "SUMMARY",
    "EpisodeRunner",
    "LocalEpisodes",
    "RolloutBatch",
    "RolloutSummary",
    "load_batch",
    "load_rows",
    "load_trajectories",
    "rollout_rows",
    "run_here",
    "run_rollout",
    "summary_table",
]


class EpisodeRunner(Protocol):
    """Runs episode `episode` of dataset row `row` and hands back its data: this process's
    workflow (`LocalEpisodes`), or Ray's rollout actors (`rltap.rollout.ray.ActorPool`)."""

    style: ExportStyle

    def rows_in_flight(self, requested: int) -> int:
        """How many rows to run at once when the caller asks for `requested`."""
        ...

    async def run_episode(
        self, row: int, episode: int, data: Any, sampling: EpisodeSampling | None = None
    ) -> EpisodeData: ...


class LocalEpisodes:
    """The episodes of a workflow whose proxy this process reaches."""

    def __init__(self, workflow: OpenAIProxyWorkflow) -> None:
        self.workflow = workflow
        self.style: ExportStyle = workflow.style

    def rows_in_flight(self, requested: int) -> int:
        return requested

    async def run_episode(
        self, row: int, episode: int, data: Any, sampling: EpisodeSampling | None = None
    ) -> EpisodeData:
        episode_sampling = None if sampling is None else sampling.for_episode(row, episode)
        result = await self.workflow.run_episode(
            data, task_id=f"row-{row}", sampling=episode_sampling
        )
        return episode_data(row, episode, result)


class _Live:
    """The live counters behind the progress bar."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0
        self.tokens = 0
        self.rewards: list[float] = []
        self.started = time.monotonic()

    def describe(self) -> str:
        rate = self.tokens / max(1e-9, time.monotonic() - self.started)
        mean = statistics.fmean(self.rewards) if self.rewards else 0.0
        return f"ok {self.ok} failed {self.failed} | {rate:,.0f} tok/s | reward {mean:+.3f}"


async def run_rollout(
    workflow: OpenAIProxyWorkflow | EpisodeRunner,
    rows: list[Any],
    out_dir: Path,
    *,
    group_size: int = 1,
    concurrency: int = 8,
    pad_token_id: int = 0,
    sampling: EpisodeSampling | None = None,
    console: Console | None = None,
    progress: Progress | None = None,
) -> RolloutBatch:
    """Run every row not yet finished in `out_dir`; returns every finished row's data (those of
    an earlier run read back), from which the batch and summary files are written.

    `sampling` is every episode's (`EpisodeSampling.for_episode`: a seed of its own from the
    row and episode numbers). The rows' bar goes on `progress` when given (a caller's live
    display, e.g. `rltap train`'s), and is removed at the end; otherwise on a display of its
    own."""
    runner = LocalEpisodes(workflow) if isinstance(workflow, OpenAIProxyWorkflow) else workflow
    batch = read_rollout(out_dir, runner.style)
    finished = batch.finished
    todo = [index for index in range(len(rows)) if index not in finished]
    writer = RowWriter(out_dir)
    live = _Live()
    summary = RolloutSummary(rows=len(rows), rows_skipped=len(rows) - len(todo))
    semaphore = asyncio.Semaphore(max(1, runner.rows_in_flight(concurrency)))
    with contextlib.ExitStack() as stack:
        own = progress is None
        if progress is None:
            progress = stack.enter_context(progress_display(console or Console(stderr=True)))
        task = progress.add_task("rollout rows", total=len(todo), live=live.describe())
        if not own:
            stack.callback(progress.remove_task, task)

        async def one_row(index: int) -> None:
            async with semaphore:
                episodes = await asyncio.gather(
                    *(
                        runner.run_episode(index, n, rows[index], sampling)
                        for n in range(group_size)
                    )
                )
            lines, entry = batch.add_row(index, episodes)
            writer.write_row(lines, entry)
            live.ok += entry["episodes_ok"]
            live.failed += entry["episodes_failed"]
            summary.errors.extend(e.error for e in episodes if e.error)
            live.tokens += sum(sum(line["loss_mask"]) for line in lines)
            live.rewards.extend(float(line["reward"] or 0.0) for line in lines)
            progress.update(task, advance=1, live=live.describe())

        await asyncio.gather(*(one_row(index) for index in todo))
    summary.wall_seconds = time.monotonic() - live.started
    summary.out_dir = str(out_dir)
    batch.summarise(summary)
    write_batch(out_dir, batch, pad_token_id)
    (out_dir / SUMMARY).write_bytes(orjson.dumps(asdict(summary), option=orjson.OPT_INDENT_2))
    return batch


def summary_table(summaries: dict[str, RolloutSummary]) -> Table:
    """One row per run: what `rltap rollout` and `rltap demo` print at the end."""
    table = Table(title="rltap rollout")
    numeric = ("episodes ok", "failed", "interactions", "generated tokens", "reward mean")
    for column in ("run", *numeric, "reward std", "wall s", "files"):
        table.add_column(column, justify="left" if column in ("run", "files") else "right")
    for name, s in summaries.items():
        table.add_row(
            name, str(s.episodes_ok), str(s.episodes_failed), str(s.interactions),
            str(s.generated_tokens), f"{s.reward_mean:.3f}", f"{s.reward_std:.3f}",
            f"{s.wall_seconds:.1f}", s.out_dir,
        )  # fmt: skip
    return table


async def run_here(
    config: RolloutConfig, console: Console, sampling: EpisodeSampling | None = None
) -> RolloutBatch:
    """`rltap rollout`'s run without Ray: on the proxy at --proxy, else on an engine and proxy
    of this process; every episode sampled by `sampling` (default: `--seed`'s)."""
    from rltap.rollout.serving import agent_workflow, local_workflow

    sampling = sampling or EpisodeSampling(seed=config.episodes.seed)

    rows = load_rows(Path(config.data))
    if config.proxy:
        if not config.admin_key:
            raise ConfigError("--proxy needs --admin-key (or RLTAP_ADMIN_KEY)")
        remote = agent_workflow(config, config.proxy, config.admin_key)
        async with contextlib.aclosing(remote):
            return await rollout_rows(config, remote, rows, 0, console, sampling)
    if config.serve.store.store is None:  # the run folder keeps the proxy's capture store
        config = config.with_serve(config.serve.with_store(str(Path(config.out) / STORE_FILE)))
    async with local_workflow(config) as (serving, workflow):
        return await rollout_rows(config, workflow, rows, serving.pad_token_id, console, sampling)


async def rollout_rows(
    config: RolloutConfig,
    runner: OpenAIProxyWorkflow | EpisodeRunner,
    rows: list[Any],
    pad_token_id: int,
    console: Console,
    sampling: EpisodeSampling | None = None,
) -> RolloutBatch:
    """`run_rollout` with `rltap rollout`'s settings (--out, --group-size, --concurrency; the
    episodes sampled by `sampling`, default `--seed`'s)."""
    return await run_rollout(
        runner,
        rows,
        Path(config.out),
        group_size=config.episodes.group_size,
        concurrency=config.episodes.concurrency,
        pad_token_id=pad_token_id,
        sampling=sampling or EpisodeSampling(seed=config.episodes.seed),
        console=console,
    )


_RolloutRun = Callable[[RolloutConfig, Console], Coroutine[Any, Any, RolloutBatch]]


def rollout_command(config: RolloutConfig, run: _RolloutRun | None = None) -> int:
    """`rltap rollout`: prints the summary table; exit 1 if every episode failed. `run` makes
    the batch instead of this process's proxy (`rltap.rollout.ray.ray_rollout`: --ray)."""
    import os

    if config.admin_key is None:
        config = replace(config, admin_key=os.environ.get("RLTAP_ADMIN_KEY"))
    console = Console(stderr=True)
    summary = asyncio.run((run or run_here)(config, console)).summary
    Console().print(summary_table({Path(config.agent).name: summary}))
    if summary.errors:
        console.print(f"[yellow]{len(summary.errors)} episodes failed; first: {summary.errors[0]}")
    if summary.episodes_retried:
        console.print(f"{summary.episodes_retried} episodes ran again after losing their actor")
    return 1 if summary.episodes_ok == 0 and summary.episodes_failed > 0 else 0
