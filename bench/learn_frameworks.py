"""Do framework agents learn through rltap? SmolLM2-135M-Instruct trained by `rltap train` behind
the LangChain math chain, the Agents SDK calculator and the CAMEL role play, each on its
arithmetic task, several seeds each; the held-out reward before and after.

What it runs, per framework and seed: `rltap train examples/<example>/agent.py:ShapedAgent` with
the example's `train.toml` (its settings: rows and episodes per step, learning rate, sampling
temperature, reply cap; CAMEL's `[policies]`, the student and the tutor, a LoRA adapter each) on
the example's `train.jsonl` (48 sums and differences, `examples/make_arithmetic_splits.py`),
rewarded by its shaped reward (1.0 for the right answer, partial credit for the format, a near
miss and, for the Agents SDK, the right tool call, for CAMEL the student's instruction holding
the right sum: each example's docstring says why), with `--eval-data` the first `--eval-rows` of its
`eval.jsonl` (held out, greedy, evaluated before step 1 and every `--eval-every` steps). The
model is SmolLM2 as `make demo` converts it (`rltap_dev.demo_model`), on the embedded transformers
engine, fp32, one torch thread; each framework runs in its own venv (bench/rl_sanity.py's, made
by the Makefile's target when missing; `--python` names another, with one framework). The
bench's flags, when given, win over train.toml.

Printed: per run the held-out reward (shaped) and pass@1 (right answers only) before (step 0)
and after (the last step), then per framework the means, the seeds' spread (the standard
deviation of the after-minus-before differences), the verdict the issue asks for (the mean
gain is more than twice that spread and at least 2 of the seeds improved) and each run's peak
RSS (its VmHWM, read every 2 s). One plot per framework,
`docs/learning-<framework>.png` (`--plots`), of the held-out reward per step and seed.

    .venv/bin/python bench/learn_frameworks.py [--frameworks langchain openai_agents camel]
        [--seeds 0 1 2] [--steps 8] [--eval-rows 16] [--out runs] [--plots docs] [--dry-run]
        [--rows-per-step N] [--group-size N] [--lr LR] [--temperature T] [--eval-every N]
        [--python FRAMEWORK_VENV_PYTHON] [--model MODEL_DIR]

The seeds of a framework run at once (`--jobs`, default 3), each `rltap train` on one torch
thread, its output in `<framework>/seed-N/train.log`; the bars show each seed's steps. A seed's
run at the defaults takes 7 to 16 minutes on this 2-core machine alone (a step 25 to 90 s: a
third rollouts, the rest training; three greedy evaluations of 16 rows); three at once share the
two cores and took 14 (LangChain), 14 (Agents SDK) and 20 (CAMEL, its tutor's role-play prompt
is long) minutes in all (docs/learning.md). `rltap train` gives the heap's free pages back after
every step (`rltap.train.memory`): a run peaks at 6.6 to 7.7 GB, so three fit in 24 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from rltap.train.run_dir import read_metrics
from rltap_dev.demo_train import logged_child, watch_steps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rl_sanity import EXAMPLES, ROOT, framework_python, smollm2_dir

RECIPE_FLAGS = {"--rows-per-step": int, "--group-size": int, "--lr": float, "--temperature": float,
                "--eval-every": int, "--default-max-tokens": int}  # fmt: skip


@dataclass(slots=True)
class Run:
    framework: str
    seed: int
    metrics: list[dict[str, Any]]
    seconds: float
    peak_kib: int = 0  # the run's peak RSS (VmHWM), 0 where /proc has none

    def evaluations(self) -> list[dict[str, Any]]:
        return [m for m in self.metrics if "eval_reward" in m]

    @property
    def before(self) -> dict[str, Any]:
        return self.evaluations()[0]

    @property
    def after(self) -> dict[str, Any]:
        return self.evaluations()[-1]

    @property
    def gain(self) -> float:
        return float(self.after["eval_reward"] - self.before["eval_reward"])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", nargs="+", choices=sorted(EXAMPLES), default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=8)
    # Each example's train.toml holds its settings; these flags, when given, win over it.
    for flag, kind in RECIPE_FLAGS.items():
        parser.add_argument(flag, type=kind, help="default: the example's train.toml")
    parser.add_argument("--eval-rows", type=int, default=16, help="held-out rows evaluated")
    parser.add_argument("--jobs", type=int, default=3, help="seeds run at once (default 3)")
    parser.add_argument("--model", help="model folder (default: the cached SmolLM2 conversion)")
    parser.add_argument(
        "--python", help="the framework venv's Python, with one framework (default: its nox venv)"
    )
    parser.add_argument("--out", default="runs", help="parent folder of the runs")
    parser.add_argument("--plots", help="folder for learning-<framework>.png (e.g. docs)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    args.frameworks = args.frameworks or ["langchain", "openai_agents", "camel"]
    if args.python and len(args.frameworks) > 1:
        parser.error("--python names one framework's venv: give one --frameworks")
    if args.plots:  # made now: a folder that cannot be made fails before any seed trains
        Path(args.plots).mkdir(parents=True, exist_ok=True)
    return args


def held_out(folder: Path, count: int, out: Path) -> Path:
    """The first `count` rows of the example's eval.jsonl, in `out`."""
    lines = (folder / "eval.jsonl").read_text(encoding="utf-8").splitlines()[:count]
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out


def train_command(args: argparse.Namespace, python: Path, framework: str, seed: int, out: Path,
                  model: str, eval_rows: Path) -> list[str]:  # fmt: skip
    """`rltap train` of the example's ShapedAgent with its train.toml, the bench's flags on top."""
    folder = ROOT / EXAMPLES[framework][0]
    overrides = []
    for flag in RECIPE_FLAGS:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            overrides += [flag, str(value)]
    return [
        str(python), "-m", "rltap.cli", "train", f"{folder / 'agent.py'}:ShapedAgent",
        "--config", str(folder / "train.toml"), "--data", str(folder / "train.jsonl"),
        "--eval-data", str(eval_rows), "--out", str(out), "--steps", str(args.steps),
        "--seed", str(seed), "--save-every", str(args.steps), "--model", model, *overrides,
    ]  # fmt: skip


def runs_table(runs: list[Run]) -> Table:
    table = Table(title="learn_frameworks: held-out reward (shaped) and pass@1, greedy")
    for column in ("framework", "seed", "before", "after", "gain", "pass@1 before", "after",
                   "steps", "minutes", "peak RSS"):  # fmt: skip
        table.add_column(column, justify="right")
    for r in runs:
        table.add_row(
            r.framework, str(r.seed), f"{r.before['eval_reward']:.3f}",
            f"{r.after['eval_reward']:.3f}", f"{r.gain:+.3f}",
            f"{r.before['eval_pass_at_1']:.3f}", f"{r.after['eval_pass_at_1']:.3f}",
            str(r.after["step"]), f"{r.seconds / 60:.1f}", gigabytes(r.peak_kib),
        )  # fmt: skip
    return table


def verdict_table(runs: list[Run], minutes: dict[str, float]) -> Table:
    table = Table(title="learn_frameworks: per framework (goal: gain > 2 x spread, 2 of 3 seeds)")
    for column in ("framework", "before", "after", "mean gain", "spread", "seeds improved",
                   "learns", "minutes", "peak RSS a run"):  # fmt: skip
        table.add_column(column, justify="right")
    for framework in dict.fromkeys(r.framework for r in runs):
        mine = [r for r in runs if r.framework == framework]
        gains = [r.gain for r in mine]
        spread = statistics.pstdev(gains) if len(gains) > 1 else 0.0
        improved = sum(g > 0 for g in gains)
        mean = statistics.fmean(gains)
        learns = mean > 2 * spread and mean > 0 and improved >= min(2, len(mine))
        table.add_row(
            framework, f"{statistics.fmean(r.before['eval_reward'] for r in mine):.3f}",
            f"{statistics.fmean(r.after['eval_reward'] for r in mine):.3f}", f"{mean:+.3f}",
            f"{spread:.3f}", f"{improved}/{len(mine)}", "yes" if learns else "no",
            f"{minutes[framework]:.1f}", gigabytes(max(r.peak_kib for r in mine)),
        )  # fmt: skip
    return table


def gigabytes(kib: int) -> str:
    return f"{kib * 1024 / 1e9:.1f} GB" if kib else "-"


def plot(runs: list[Run], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for framework in dict.fromkeys(r.framework for r in runs):
        figure, axes = plt.subplots(figsize=(6, 3.5))
        for r in (r for r in runs if r.framework == framework):
            points = r.evaluations()
            axes.plot([m["step"] for m in points], [m["eval_reward"] for m in points],
                      marker="o", label=f"seed {r.seed}")  # fmt: skip
        axes.set(xlabel="step", ylabel="held-out reward (greedy)", ylim=(0, 1),
                 title=f"{framework}: SmolLM2-135M-Instruct via rltap train")  # fmt: skip
        axes.legend()
        figure.tight_layout()
        path = folder / f"learning-{framework}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


@dataclass(slots=True)
class SeedRun:
    """One seed's `rltap train` child: where it writes, and how long it ran."""

    seed: int
    folder: Path
    command: list[str]
    seconds: float = 0.0
    peak_kib: int = 0

    @property
    def log(self) -> Path:
        return self.folder / "train.log"


class SeedFailed(Exception):
    pass


async def run_seed(s: SeedRun, gate: asyncio.Semaphore, progress: Progress, bar: TaskID) -> None:
    """`s`'s run once `gate` lets it start (its output in its log, as `rltap demo`'s children);
    SeedFailed when it fails. Cancelled, it terminates the run."""
    async with gate:
        progress.console.print(f"$ {' '.join(s.command)}", style="dim", soft_wrap=True)
        progress.start_task(bar)
        started = time.monotonic()
        child = logged_child(s.command, s.log, ROOT, HF_HUB_DISABLE_PROGRESS_BARS="1")
        async with child as process:
            watch = asyncio.create_task(watch_peak_rss(process.pid, s))
            try:
                returncode = await watch_steps(process, s.folder / "train", progress, bar)
            finally:
                watch.cancel()
        s.seconds = time.monotonic() - started
        progress.stop_task(bar)
    if returncode != 0:
        raise SeedFailed(f"seed {s.seed}: exit {returncode} (see {s.log})")


def peak_rss_kib(pid: int) -> int | None:
    """The process's peak RSS so far (VmHWM in /proc, KiB); None once it has exited (or where
    /proc has no status)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith("VmHWM:")), 0)


async def watch_peak_rss(pid: int, s: SeedRun, every: float = 2.0) -> None:
    """`s.peak_kib`: the child's peak RSS, read every `every` seconds until it exits."""
    while (kib := peak_rss_kib(pid)) is not None:
        s.peak_kib = max(s.peak_kib, kib)
        await asyncio.sleep(every)


async def run_seeds(seeds: list[SeedRun], jobs: int, steps: int, console: Console) -> None:
    """The seeds' runs, `jobs` at a time (each one torch thread), with a bar per seed of the
    steps it has logged; when one fails the others are stopped."""
    gate = asyncio.Semaphore(jobs)
    columns = (TextColumn("{task.description:<8}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("steps"), TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console) as progress:
        try:
            async with asyncio.TaskGroup() as group:
                for s in seeds:
                    bar = progress.add_task(f"seed {s.seed}", total=steps, start=False)
                    group.create_task(run_seed(s, gate, progress, bar))
        except* SeedFailed as failed:
            raise SystemExit(str(failed.exceptions[0])) from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    model = smollm2_dir(args, console)
    out = Path(args.out).resolve() / time.strftime("learn-frameworks-%Y%m%d-%H%M%S")
    runs: list[Run] = []
    minutes: dict[str, float] = {}
    for framework in args.frameworks:
        args.framework = framework
        python = framework_python(args, console)
        seeds = []
        for seed in args.seeds:
            folder = out / framework / f"seed-{seed}"
            rows = folder / "eval-rows.jsonl"
            if not args.dry_run:
                folder.mkdir(parents=True)
                held_out(ROOT / EXAMPLES[framework][0], args.eval_rows, rows)
            command = train_command(args, python, framework, seed, folder / "train", model, rows)
            seeds.append(SeedRun(seed, folder, command))
        if args.dry_run:
            for s in seeds:
                console.print(f"$ {' '.join(s.command)}", style="dim", soft_wrap=True)
            continue
        console.print(f"[bold]{framework}: seeds {args.seeds}, {args.jobs} at a time")
        started = time.monotonic()
        asyncio.run(run_seeds(seeds, args.jobs, args.steps, console))
        minutes[framework] = (time.monotonic() - started) / 60
        for s in seeds:
            metrics = read_metrics(s.folder / "train")
            runs.append(Run(framework, s.seed, metrics, s.seconds, s.peak_kib))
        console.print(runs_table(runs[-len(seeds) :]))
    if args.dry_run:
        return 0
    shown = Console() if sys.stdout.isatty() else Console(width=160)
    shown.print(runs_table(runs))
    shown.print(verdict_table(runs, minutes))
    if args.plots:
        for path in plot(runs, Path(args.plots)):
            shown.print(f"plot: {path}")
    shown.print(f"files: {out} (each run's rltap train folder under <framework>/seed-N/train)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
