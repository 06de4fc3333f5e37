"""`rltap eval`: an agent's score on held-out rows, with the agent code and rollout machinery
`rltap rollout` uses, and the held-out evaluation `rltap train --eval-data` runs between steps.

Each row runs K episodes (`--group-size`), every call sampled at the evaluation's temperature
(`--greedy`: 0) whatever the agent asks for (`rltap.record.sampling`). An episode's reward is
its return: the discounted reward of its first call (with the default --discount 1, everything
the agent rewarded along the conversation); an episode that failed scores 0 and does not pass.
A sample passes when its reward is >= `--pass-threshold`; pass@k is the unbiased estimator of
Chen et al. (2021), 1 - C(n - c, k) / C(n, k) for a row with c passes in n samples, averaged
over the rows.

The rollout's files go to --out as `rltap rollout` writes them, and `eval.json` beside them:
`{"rows", "samples", "temperature", "pass_threshold", "reward_mean", "reward_std",
"episodes_failed", "pass_at_k": {"1": ..., ...}, "per_row": [{"row", "rewards", "passed"}]}`.
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from rltap.config import EvalConfig
from rltap.record.sampling import EpisodeSampling
from rltap.rollout.files import load_rows
from rltap.rollout.ray.runs import ray_rollout
from rltap.rollout.runner import run_here

__all__ = ["EVAL_FILE", "EvalResult", "eval_command", "eval_table", "pass_at_k", "score_rows"]

EVAL_FILE = "eval.json"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of k samples drawn without replacement from n, c of
    which pass, passes: 1 - C(n - c, k) / C(n, k), as a product (no huge binomials)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        msg = f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}"
        raise ValueError(msg)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass(slots=True)
class EvalResult:
    """What an evaluation measured (the fields of `eval.json`)."""

    rows: int
    samples: int
    temperature: float
    pass_threshold: float
    reward_mean: float
    reward_std: float
    episodes_failed: int
    pass_at_k: dict[str, float] = field(default_factory=dict)
    per_row: list[dict[str, Any]] = field(default_factory=list)

    def write(self, out_dir: Path) -> Path:
        path = out_dir / EVAL_FILE
        path.write_bytes(orjson.dumps(asdict(self), option=orjson.OPT_INDENT_2))
        return path


def _episode_rewards(lines: Iterable[Mapping[str, Any]]) -> dict[tuple[int, int], float]:
    """(row, episode) -> the episode's return: the mean discounted reward of its first calls."""
    roots: dict[tuple[int, int], list[float]] = {}
    for line in lines:
        if line["parent_id"] is None:
            place = (int(line["row"]), int(line["episode"]))
            roots.setdefault(place, []).append(float(line["reward"] or 0.0))
    return {place: statistics.fmean(values) for place, values in roots.items()}


def score_rows(
    lines: Iterable[Mapping[str, Any]],
    rows: int,
    samples: int,
    *,
    temperature: float,
    pass_threshold: float,
) -> EvalResult:
    """Mean reward and pass@1 .. pass@`samples` of a rollout's trajectory lines (`rows` rows,
    `samples` episodes each); an episode without lines (it failed) scores 0, not passing."""
    returns = _episode_rewards(lines)
    per_row: list[dict[str, Any]] = []
    rewards: list[float] = []
    for row in range(rows):
        row_rewards = [returns.get((row, n), 0.0) for n in range(samples)]
        passed = [(row, n) in returns and r >= pass_threshold for n, r in enumerate(row_rewards)]
        per_row.append({"row": row, "rewards": row_rewards, "passed": sum(passed)})
        rewards.extend(row_rewards)
    ks = range(1, samples + 1)
    pass_k = {
        str(k): statistics.fmean(pass_at_k(samples, entry["passed"], k) for entry in per_row)
        if per_row
        else 0.0
        for k in ks
    }
    return EvalResult(
        rows=rows,
        samples=samples,
        temperature=temperature,
        pass_threshold=pass_threshold,
        reward_mean=statistics.fmean(rewards) if rewards else 0.0,
        reward_std=statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        episodes_failed=rows * samples - len(returns),
        pass_at_k=pass_k,
        per_row=per_row,
    )


def eval_table(result: EvalResult, title: str) -> Table:
    """The evaluation's one line: rows, samples, mean reward and pass@k."""
    table = Table(title=f"rltap eval: {title}")
    ks = list(result.pass_at_k)
    for column in ("rows", "samples", "T", "failed", "reward mean", "reward std"):
        table.add_column(column, justify="right")
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
    table.add_row(
        str(result.rows), str(result.samples), f"{result.temperature:g}",
        str(result.episodes_failed), f"{result.reward_mean:.3f}", f"{result.reward_std:.3f}",
        *(f"{result.pass_at_k[k]:.3f}" for k in ks),
    )  # fmt: skip
    return table


def eval_command(config: EvalConfig) -> int:
    """`rltap eval`: the rollout, then the score table and `eval.json`; exit 1 if every episode
    failed."""
    if config.admin_key is None:
        config = replace(config, admin_key=os.environ.get("RLTAP_ADMIN_KEY"))
    temperature = config.scoring.sampling_temperature
    sampling = EpisodeSampling(seed=config.episodes.seed, temperature=temperature)
    console = Console(stderr=True)
    if config.ray.ray is not None:
        batch = asyncio.run(ray_rollout(config, console, sampling))
    else:
        batch = asyncio.run(run_here(config, console, sampling))
    summary, out = batch.summary, Path(config.out)
    result = score_rows(
        batch.lines,
        len(load_rows(Path(config.data))),
        config.episodes.group_size,
        temperature=temperature,
        pass_threshold=config.scoring.passing.pass_threshold,
    )
    path = result.write(out)
    Console().print(eval_table(result, Path(config.agent).name))
    console.print(f"eval files: {out} ({path.name}, trajectories.jsonl, summary.json)")
    if summary.errors:
        console.print(f"[yellow]{len(summary.errors)} episodes failed; first: {summary.errors[0]}")
    return 1 if summary.episodes_ok == 0 and summary.episodes_failed > 0 else 0
