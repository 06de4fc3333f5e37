"""`rltap demo`'s training part: a framework agent trained through rltap, its held-out reward
per step.

The LangChain math chain (`examples/langchain_math/agent.py:ShapedAgent`) is trained by
`rltap train` with the example's own settings (`train.toml`, the ones bench/learn_frameworks.py
uses) on the demo's model, in the LangChain venv (the framework is not in rltap's), for as many
steps as the demo's minutes allow: fewer rows a step than the bench, and the first held-out rows
evaluated greedily before step 1 and after every step. Its progress is a bar per step; the train
table (reward, held-out reward, KL, entropy, tokens, seconds) and the run folder follow, and the
log is `RUN/train.log`. bench/learn_frameworks.py runs the longer training that measures whether
the agents learn (docs/learning.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from rltap.train.command import print_run
from rltap.train.run_dir import updates_logged

__all__ = [
    "TRAIN_EXAMPLE",
    "TRAIN_FRAMEWORK",
    "TRAIN_STEPS",
    "TRAIN_STEPS_TINY",
    "TrainRun",
    "child_failure",
    "logged_child",
    "plan_training",
    "run_training_child",
    "train_framework_agent",
    "watch_steps",
]

TRAIN_FRAMEWORK = "langchain"
TRAIN_EXAMPLE = "examples/langchain_math"
TRAIN_AGENT = "ShapedAgent"
TRAIN_STEPS = 2  # SmolLM2: 45 to 70 s a step with its evaluation, on 2 cores (make demo < 5 min)
TRAIN_STEPS_TINY = 2
EVAL_ROWS = 8
EVAL_ROWS_TINY = 2
# On top of the example's train.toml: fewer rows a step, an evaluation after every step.
TRAIN_FLAGS = ("--rows-per-step", "2", "--eval-every", "1", "--seed", "1")


@dataclass(slots=True)
class TrainRun:
    """The demo's training run: its command, folder and how it went."""

    out_dir: Path
    steps: int
    command: list[str] = field(default_factory=list)
    problem: str = ""  # why it cannot run or did not finish
    returncode: int | None = None

    @property
    def log(self) -> Path:
        return self.out_dir.parent / "train.log"

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def plan_training(root: Path, run_dir: Path, *, python: Path, model: str, tiny: bool) -> TrainRun:
    """`rltap train` of the LangChain example on `model` in the venv of `python`, into
    `run_dir/train`; the held-out rows it evaluates are copied to `run_dir/train-eval.jsonl`."""
    folder = root / TRAIN_EXAMPLE
    steps = TRAIN_STEPS_TINY if tiny else TRAIN_STEPS
    run = TrainRun(run_dir / "train", steps)
    if not python.exists():
        run.problem = f"missing {python} (`make demo-venvs` makes it)"
        return run
    lines = (folder / "eval.jsonl").read_text(encoding="utf-8").splitlines()
    held_out = run_dir / "train-eval.jsonl"
    held_out.parent.mkdir(parents=True, exist_ok=True)
    count = EVAL_ROWS_TINY if tiny else EVAL_ROWS
    held_out.write_text("".join(line + "\n" for line in lines[:count]), encoding="utf-8")
    run.command = [
        str(python), "-m", "rltap.cli", "train", f"{folder / 'agent.py'}:{TRAIN_AGENT}",
        "--config", str(folder / "train.toml"), "--data", str(folder / "train.jsonl"),
        "--eval-data", str(held_out), "--model", model, "--out", str(run.out_dir),
        "--steps", str(steps), "--save-every", str(steps), *TRAIN_FLAGS,
    ]  # fmt: skip
    return run


# Every child process of the demo: unbuffered output into its log, one OpenMP thread each (two
# shared cores), log lines 160 columns wide.
CHILD_ENV = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "160"}


@contextlib.asynccontextmanager
async def logged_child(
    command: list[str], log_path: Path, cwd: Path, **env: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`command` started with `env` on top of `CHILD_ENV`, its output (after a `$ command` line)
    in `log_path`; terminated if the block is left before it ends."""
    with log_path.open("wb") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        process = await asyncio.create_subprocess_exec(
            *command,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **CHILD_ENV, **env},
            cwd=cwd,
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.terminate()
                await process.wait()


# Lines of a failed child's log shown with its exit status (the log's end holds the error).
FAILURE_LINES = 25


def child_failure(returncode: int | None, log_path: Path) -> str:
    """Why a child of the demo failed: its exit status, its log and the log's last lines."""
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    # rich redraws a progress bar with carriage returns: a line's last drawing is what was seen
    last = [line.rsplit("\r", 1)[-1] for line in lines[-FAILURE_LINES:]]
    return f"exit {returncode}; see {log_path}; it ends:\n" + "\n".join(last)


async def watch_steps(
    process: asyncio.subprocess.Process, run_dir: Path, progress: Progress, task: TaskID
) -> int:
    """Wait for `rltap train` in `process` to end, `task`'s bar showing the steps `run_dir` has
    logged meanwhile; its exit status."""
    while process.returncode is None:
        progress.update(task, completed=updates_logged(run_dir))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), timeout=1.0)
    progress.update(task, completed=updates_logged(run_dir))
    return process.returncode


async def run_training_child(run: TrainRun, root: Path, console: Console) -> None:
    """Run `run.command` with a progress bar of its steps; its output goes to `run.log`."""
    columns = (TextColumn("{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("steps"), TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("rltap train", total=run.steps)
        async with logged_child(
            run.command, run.log, root, HF_HUB_DISABLE_PROGRESS_BARS="1"
        ) as process:
            run.returncode = await watch_steps(process, run.out_dir, progress, task)
    if not run.ok:
        run.problem = child_failure(run.returncode, run.log)


def train_framework_agent(
    run: TrainRun, root: Path, console: Console, out: Console, shown: Callable[[Path], str]
) -> None:
    """The demo's training run, then its table and folder (or why it did not run)."""
    if not run.problem:
        console.print(
            f"rltap train: {run.steps} steps of the LangChain agent ({TRAIN_EXAMPLE}), "
            f"held-out reward after each"
        )
        started = time.monotonic()
        asyncio.run(run_training_child(run, root, console))
        console.print(f"rltap train took {time.monotonic() - started:.1f} s")
    if run.problem:
        out.print(f"rltap train: {run.problem}", style="yellow", markup=False)
        return
    print_run(out, run.out_dir, label="train run files", shown=shown)
