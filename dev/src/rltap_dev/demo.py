"""`rltap demo`: the whole system on a real small chat model, with the three framework examples.

The engine (embedded transformers; SmolLM2-135M-Instruct by default, see `rltap_dev.demo_model`) and
the proxy run in this process on 127.0.0.1. Each framework's example then runs as `rltap rollout
examples/<name>/agent.py:Agent --proxy URL` with the Python of that framework's own virtual
environment: the frameworks pin conflicting versions (camel-ai wants pydantic<=2.12.0,
openai-agents >=2.12.2), so no one venv holds all three; `make demo` creates them with nox. The
runs go at once, so the engine batches their calls. Each writes the `rltap rollout` files, the
rows it ran (`data.jsonl`) and its log (`rollout.log`) to `runs/demo-<timestamp>/<framework>/`,
and one table is built from their `summary.json`.

Then the loop closes: `rltap train` trains the LangChain agent on its arithmetic task, on the
same model, for a few steps, with its held-out reward after each (`rltap_dev.demo_train`); its table
and run folder (`runs/demo-<timestamp>/train/`) end the demo.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from transformers.utils import logging as transformers_logging

from rltap.config import ConfigError, DemoConfig
from rltap.protocols import SPECS
from rltap.proxy import ProxyServer, ServeSetup
from rltap.rollout.runner import LEDGER, SUMMARY, RolloutSummary
from rltap_dev.demo_model import demo_model
from rltap_dev.demo_train import (
    TRAIN_FRAMEWORK,
    child_failure,
    logged_child,
    plan_training,
    train_framework_agent,
)

__all__ = [
    "EXAMPLES",
    "DemoRun",
    "Example",
    "demo_command",
    "demo_table",
]

_LOG_EVERY = 30.0  # seconds between progress lines when stderr is not a terminal


@dataclass(frozen=True, slots=True)
class Example:
    framework: str
    folder: str  # relative to the repository root
    rows: int  # how many rows `rltap demo` runs unless --rows says


# CAMEL's role play makes 3 or 4 calls an episode on ever longer prompts (three agents), the
# others one or two: one row of it takes as long as a few of theirs on two CPU cores.
EXAMPLES = (
    Example("openai_agents", "examples/openai_agents_calculator", rows=3),
    Example("camel", "examples/camel_roleplay", rows=1),
    Example("langchain", "examples/langchain_math", rows=3),
)
FRAMEWORKS = tuple(example.framework for example in EXAMPLES)


@dataclass(slots=True)
class DemoRun:
    """One framework's run: where it writes, how it went."""

    framework: str
    out_dir: Path
    command: list[str] = dataclasses.field(default_factory=list)
    rows: int = 0
    problem: str = ""  # why it cannot run or did not finish
    returncode: int | None = None
    wall_seconds: float = 0.0
    summary: RolloutSummary | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.summary is not None

    @property
    def log(self) -> Path:
        return self.out_dir / "rollout.log"


def repo_root() -> Path:
    """The folder holding `examples/`: the current one, else this source checkout's."""
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (candidate / "examples").is_dir():
            return candidate
    msg = "run `rltap demo` from the rltap repository (no examples/ folder here)"
    raise ConfigError(msg)


def _pythons(root: Path, overrides: list[str]) -> dict[str, Path]:
    pythons = {
        fw: root / ".nox" / f"integration-framework-{fw}" / "bin" / "python" for fw in FRAMEWORKS
    }
    for item in overrides:
        framework, sep, path = item.partition("=")
        if not sep or framework not in pythons:
            msg = f"--python takes FRAMEWORK=PATH with FRAMEWORK one of {', '.join(FRAMEWORKS)}"
            raise ConfigError(msg)
        pythons[framework] = Path(path)
    return pythons


def _selected(frameworks: list[str] | None) -> list[Example]:
    names = [n for item in frameworks or FRAMEWORKS for n in item.split(",") if n]
    unknown = sorted(set(names) - set(FRAMEWORKS))
    if unknown:
        msg = f"unknown framework {', '.join(unknown)}; choose from {', '.join(FRAMEWORKS)}"
        raise ConfigError(msg)
    return [example for example in EXAMPLES if example.framework in names]


def plan_runs(config: DemoConfig, root: Path, run_dir: Path) -> list[DemoRun]:
    """One `rltap rollout` command line per framework, with the rows it runs copied."""
    pythons = _pythons(root, config.python or [])
    runs = []
    for example in _selected(config.frameworks):
        folder = root / example.folder
        run = DemoRun(example.framework, run_dir / example.framework)
        python = pythons[example.framework]
        missing = [
            p for p in (folder / "agent.py", folder / "data.jsonl", python) if not p.exists()
        ]
        if missing:
            run.problem = f"missing {', '.join(str(p) for p in missing)}"
            if python in missing:
                run.problem += " (`make demo-venvs` makes it; or --python FRAMEWORK=PATH)"
            runs.append(run)
            continue
        run.out_dir.mkdir(parents=True, exist_ok=True)
        lines = [ln for ln in (folder / "data.jsonl").read_text().splitlines() if ln.strip()]
        run.rows = min(len(lines), config.rows or example.rows)
        data = run.out_dir / "data.jsonl"
        data.write_text("".join(line + "\n" for line in lines[: run.rows]), encoding="utf-8")
        run.command = [
            str(python), "-m", "rltap.cli", "rollout", f"{folder / 'agent.py'}:Agent",
            "--data", str(data), "--out", str(run.out_dir), "--group-size", str(config.group_size),
        ]  # fmt: skip
        if config.episode_timeout:
            run.command += ["--episode-timeout", str(config.episode_timeout)]
        runs.append(run)
    return runs


def _load_summary(out_dir: Path) -> RolloutSummary | None:
    path = out_dir / SUMMARY
    if not path.is_file():
        return None
    data = orjson.loads(path.read_bytes())
    names = {f.name for f in dataclasses.fields(RolloutSummary)}
    return RolloutSummary(**{k: v for k, v in data.items() if k in names})


async def _run_child(run: DemoRun, proxy_url: str, admin_key: str, root: Path) -> None:
    command = [*run.command, "--proxy", proxy_url]
    started = time.monotonic()
    try:
        # The admin key in the environment: on the command line `ps` would show it.
        async with logged_child(command, run.log, root, RLTAP_ADMIN_KEY=admin_key) as process:
            run.returncode = await process.wait()
    finally:
        run.wall_seconds = time.monotonic() - started
    run.summary = _load_summary(run.out_dir)
    if not run.ok:
        run.problem = child_failure(run.returncode, run.log)


def _rows_done(run: DemoRun) -> int:
    ledger = run.out_dir / LEDGER
    return ledger.read_bytes().count(b"\n") if ledger.is_file() else 0


class _EngineLine:
    """Calls, generated tokens, tokens per second since the first session, open sessions."""

    def __init__(self, metrics: Any) -> None:
        self.registry = metrics.registry
        self.first_session: float | None = None

    def __call__(self) -> str:
        value = self.registry.get_sample_value
        tokens = value("rltap_completion_tokens_total") or 0.0
        calls = sum(
            value("rltap_proxy_overhead_seconds_count", {"route": route}) or 0.0
            for route in SPECS  # generation metrics are labelled by API name
        )
        sessions = value("rltap_open_sessions") or 0.0
        if self.first_session is None and (sessions or tokens):
            self.first_session = time.monotonic()
        elapsed = time.monotonic() - (self.first_session or time.monotonic())
        rate = tokens / elapsed if elapsed > 0 else 0.0
        return f"{calls:.0f} calls · {tokens:,.0f} tokens · {rate:,.1f} tok/s · {sessions:.0f} open"


async def run_all(
    runs: list[DemoRun], setup: ServeSetup, admin_key: str, root: Path, console: Console
) -> None:
    """Start the proxy, run every runnable framework at once with live progress."""
    app = setup.app(admin_key)
    columns = (
        TextColumn("{task.description:<14}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    console.print("starting the engine and the proxy")
    async with ProxyServer(app) as server:
        with Progress(*columns, console=console) as progress:
            engine_line = _EngineLine(app.state.rltap.metrics)
            engine = progress.add_task("engine", total=None, detail="")
            todo = [run for run in runs if not run.problem]
            tasks = {run.framework: progress.add_task(run.framework, total=run.rows, detail="")
                     for run in todo}  # fmt: skip
            children = [
                asyncio.create_task(_run_child(run, server.url, admin_key, root)) for run in todo
            ]
            logged = time.monotonic()
            while not all(child.done() for child in children):
                _refresh(progress, engine, engine_line(), tasks, todo)
                await asyncio.wait(children, timeout=0.5)
                if not console.is_terminal and time.monotonic() - logged > _LOG_EVERY:
                    logged = time.monotonic()  # no live display in a log: a line now and then
                    rows = ", ".join(f"{r.framework} {_rows_done(r)}/{r.rows}" for r in todo)
                    console.print(f"engine {engine_line()} | rows {rows}")
            _refresh(progress, engine, engine_line(), tasks, todo)
            progress.stop_task(engine)
            await asyncio.gather(*children)


def _refresh(
    progress: Progress,
    engine: TaskID,
    engine_line: str,
    tasks: dict[str, TaskID],
    runs: list[DemoRun],
) -> None:
    progress.update(engine, detail=engine_line)
    for run in runs:
        done = _rows_done(run)
        if run.returncode is None:
            detail = f"{done}/{run.rows} rows"
        else:
            detail = f"{done}/{run.rows} rows · {'done' if run.ok else 'FAILED'}"
            progress.stop_task(tasks[run.framework])
        progress.update(tasks[run.framework], completed=done, detail=detail)


def demo_table(runs: list[DemoRun]) -> Table:
    """The demo's one table: a row per framework from its run's summary.json."""
    table = Table(title="rltap demo")
    for header in ("framework", "status", "episodes ok", "failed", "interactions",
                   "generated tokens", "mean reward", "wall s", "files"):  # fmt: skip
        left = header in ("framework", "status", "files")
        table.add_column(header, justify="left" if left else "right")
    for run in runs:
        table.add_row(
            run.framework,
            "ok" if run.ok else ("not run" if run.returncode is None else "failed"),
            *_counts(run.summary),
            f"{run.wall_seconds:.1f}" if run.returncode is not None else "-",
            _shown(run.out_dir),
        )
    return table


def _counts(s: RolloutSummary | None) -> list[str]:
    if s is None:
        return ["-"] * 5
    counts = (s.episodes_ok, s.episodes_failed, s.interactions, s.generated_tokens)
    return [*map(str, counts), f"{s.reward_mean:.3f}"]


def _shown(path: Path) -> str:
    """`path` relative to the current folder when it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def demo_command(config: DemoConfig) -> int:
    """`rltap demo`: the frameworks' table, then the training steps' table; exit 1 unless every
    framework's run and the training finished."""
    started = time.monotonic()
    console = Console(stderr=True, soft_wrap=True)  # log lines stay whole when not a terminal
    root = repo_root()
    if (config.rows is not None and config.rows < 1) or config.group_size < 1:
        msg = "--rows and --group-size must be at least 1"
        raise ConfigError(msg)
    engine = config.serve.engine
    if config.tiny and engine.model:
        msg = "--tiny and --model exclude each other"
        raise ConfigError(msg)
    run_dir = Path(config.out) / time.strftime("demo-%Y%m%d-%H%M%S")
    runs = plan_runs(config, root, run_dir)
    model, model_note = demo_model(engine.model, tiny=config.tiny, say=console.print)
    train = plan_training(
        root,
        run_dir,
        python=_pythons(root, config.python or [])[TRAIN_FRAMEWORK],
        model=model,
        tiny=config.tiny,
    )
    serve = dataclasses.replace(config.serve, engine=dataclasses.replace(engine, model=model))
    console.print(f"model: {model}\n       {model_note}")
    admin_key = secrets.token_urlsafe(24)
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if any(not run.problem for run in runs):
        setup = ServeSetup.load(serve)
        asyncio.run(run_all(runs, setup, admin_key, root, console))
    out = Console() if sys.stdout.isatty() else Console(width=200)
    out.print(demo_table(runs))
    out.print(model_note)
    for run in runs:
        if run.problem:
            out.print(f"{run.framework}: {run.problem}", style="yellow", markup=False)
        if run.summary and run.summary.errors:
            out.print(f"[yellow]{run.framework}: first episode error: {run.summary.errors[0]}")
    train_framework_agent(train, root, console, out, _shown)
    out.print(f"total wall time {time.monotonic() - started:.1f} s")
    return 0 if runs and all(run.ok for run in runs) and train.ok else 1
