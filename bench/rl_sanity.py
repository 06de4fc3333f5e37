"""RL sanity check: SmolLM2-135M-Instruct behind a framework agent, trained by `rltap train`.

What it measures: the demo's arithmetic task (examples/langchain_math: a LangChain chain with a
calculator tool, reward 1.0 when the reply's last number is the answer; or, with
`--framework openai_agents`, examples/openai_agents_calculator: an Agents SDK agent, reward 1.0
when its 'Final answer:' is the answer; SmolLM2 scored 0.000 on it in `make demo`, and groups
of zero rewards carry no signal, so LangChain is the default) trained for `--steps` steps of
`--rows-per-step` rows x `--group-size` episodes on SmolLM2-135M-Instruct (`rltap_dev.demo_model`,
the embedded transformers engine, fp32 on CPU). Printed: a table of the steps (reward mean and
std, generated tokens, rollout / train / sync seconds, from the run's metrics.jsonl), then the
reward before and after: before is step 1's reward (policy version 0 on the first step's rows),
after is a `rltap rollout` of the last checkpoint on the same rows with the same group size
(temperature 1.0 both: the expected reward of the sampling policy), the generated tokens of
both, and the mean seconds per step split into rollout, train and sync. Each run's files stay
under --out.

How it runs: the framework lives in its own venv (`.nox/integration-framework-<fw>`, rltap
installed there editable), so `rltap train` and the evaluation rollout run as subprocesses of
that venv's Python; this script (run with the project's .venv, where `make demo`'s packages
convert SmolLM2 once and cache it: `rltap_dev.demo_model.cached_smollm2_dir`, so no --model is
needed) plans them and prints the tables. The framework venv needs the train extra
(TensorBoard, matplotlib): where it is missing or lacks them, the script makes it with the
Makefile's target for it (`make .nox/integration-framework-<fw>/.rltap-demo`, what `make
demo-venvs` runs per framework). `--dry-run` prints the venv, model and commands only.

    make .venv/.demo-deps
    .venv/bin/python bench/rl_sanity.py [--framework langchain] [--steps 3] [--rows-per-step 4]
        [--group-size 4] [--lr 1e-4] [--seed 0] [--out runs] [--dry-run]

The defaults (3 steps of 4 rows x 4 episodes, lr 1e-4; at 5e-5 nothing moved in 3 steps) take
about 5 minutes on 2 CPU cores shared with other work; bigger runs, e.g. `--steps 20
--rows-per-step 6 --group-size 8`, take a minute or more per step. 16 episodes of a 0/1 reward
near 0.2 have a standard error of about 0.1: read a 3-step reward change against that. `--seed`
seeds the engine's sampling too (each episode's calls), so a rerun of one episode at a time
repeats; episodes batched together can still differ by fp32 rounding. What 3 steps move
reliably is the reply's length (the reward favours a short "12 + 7 = 19" over an explanation
that ends on another number).

Measured (2026-12-01, defaults, LangChain, 2 shared CPU cores), two runs of the same command:
reward before 0.125, after 0.500, generated tokens 1341 -> 291; and reward 0.188 -> 0.000,
tokens 1084 -> 701 (short replies, wrong sums: "2 + 3 = 6."). Per step: rollout 38.3 / 33.7 s,
train 31.2 / 26.9 s, sync 0.27 / 0.36 s (the embedded engine's in-place copy); `rltap train`
235 / 218 s in all (loads and the step-3 checkpoint included), the evaluation 50 / 65 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "langchain": ("examples/langchain_math", "langchain_core"),
    "openai_agents": ("examples/openai_agents_calculator", "agents"),
    "camel": ("examples/camel_roleplay", "camel"),
}
TRAIN_MODULES = ("tensorboard", "matplotlib")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=sorted(EXAMPLES), default="langchain")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rows-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--default-max-tokens", type=int, default=96,
        help="reply cap when the agent sets none (the Agents SDK example; LangChain asks 128)",
    )  # fmt: skip
    parser.add_argument("--model", help="model folder (default: the cached SmolLM2 conversion)")
    parser.add_argument("--python", help="the framework venv's Python (default: its nox venv)")
    parser.add_argument("--out", default="runs", help="parent folder of the run's folder")
    parser.add_argument(
        "--dry-run", action="store_true",
        help="print the venv, model and commands the run would use; run nothing",
    )  # fmt: skip
    return parser.parse_args(argv)


def venv_stamp(framework: str) -> Path:
    """The Makefile target that makes the framework's venv (`make demo-venvs` makes them all)."""
    return ROOT / ".nox" / f"integration-framework-{framework}" / ".rltap-demo"


def missing_modules(python: Path, framework: str) -> list[str]:
    """The framework and train-extra modules `python` cannot import (all of them: no venv)."""
    modules = (EXAMPLES[framework][1], *TRAIN_MODULES)
    if not python.exists():
        return list(modules)
    probe = (
        "import importlib.util as u, sys; print(*[m for m in sys.argv[1:] if not u.find_spec(m)])"
    )
    return subprocess.run(
        [str(python), "-c", probe, *modules], capture_output=True, text=True, check=True
    ).stdout.split()


def framework_python(args: argparse.Namespace, console: Console) -> Path:
    """The framework venv's Python, with the framework and the train extra: its nox venv,
    made (or remade, when it lacks them) by the Makefile's target for it when needed."""
    if args.python:
        python = Path(args.python)
        missing = missing_modules(python, args.framework)
        if missing:
            raise SystemExit(f"{python} lacks {', '.join(missing)}")
        return python
    stamp = venv_stamp(args.framework)
    python = stamp.parent / "bin" / "python"
    missing = missing_modules(python, args.framework)
    if missing:
        build = ["make", str(stamp.relative_to(ROOT))]
        console.print(f"{args.framework} venv lacks {', '.join(missing)}: $ {' '.join(build)}")
        if not args.dry_run:
            stamp.unlink(missing_ok=True)  # a venv made before the train extra: remade
            subprocess.run(build, cwd=ROOT, check=True)
    return python


def smollm2_dir(args: argparse.Namespace, console: Console) -> str:
    """--model, else SmolLM2 as `make demo` converts and caches it (converted now if not yet)."""
    if args.model:
        return str(args.model)
    from rltap_dev.demo_model import cached_smollm2_dir, smollm2_cache_target

    try:
        if args.dry_run:
            target = smollm2_cache_target()
            state = "cached" if target.is_dir() else "converted on a run"
            console.print(f"model: {target} ({state})")
            return str(target)
        return str(cached_smollm2_dir())
    except FileNotFoundError as exc:  # the GGUF's package is not installed
        raise SystemExit(f"{exc}; `make .venv/.demo-deps` installs it") from None


def run_logged(command: list[str], log: Path, console: Console, *, dry_run: bool) -> float:
    """Run `command` (its progress on this terminal, its stdout in `log`); its wall seconds."""
    console.print(f"$ {' '.join(command)}", style="dim", soft_wrap=True)
    if dry_run:
        return 0.0
    # huggingface_hub's switch, which transformers' bars follow: no "Loading weights" bars.
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        result = subprocess.run(command, stdout=out, cwd=ROOT, env=env, check=False)
    if result.returncode != 0:
        raise SystemExit(f"exit {result.returncode}: {' '.join(command[:4])} ... (see {log})")
    return time.monotonic() - started


def first_rows(data: Path, count: int, out: Path) -> Path:
    """Step 1's rows (`rltap train` reads the dataset in order, round and round) into `out`."""
    rows = [line for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    out.write_text("".join(rows[i % len(rows)] + "\n" for i in range(count)), encoding="utf-8")
    return out


def steps_table(metrics: list[dict[str, Any]]) -> Table:
    table = Table(title="rl_sanity: steps (metrics.jsonl)")
    headers = ("step", "reward mean", "reward std", "tokens", "rollout s", "train s", "sync s")
    for header in headers:
        table.add_column(header, justify="right")
    for m in metrics:
        table.add_row(
            str(m["step"]), f"{m['reward_mean']:.3f}", f"{m['reward_std']:.3f}",
            f"{m['tokens']:.0f}", f"{m['rollout_seconds']:.1f}", f"{m['train_seconds']:.1f}",
            f"{m['sync_seconds']:.2f}",
        )  # fmt: skip
    return table


def summary_table(
    args: argparse.Namespace,
    metrics: list[dict[str, Any]],
    before: dict[str, Any],
    after: dict[str, Any],
) -> Table:
    episodes = args.rows_per_step * args.group_size
    table = Table(title=f"rl_sanity: {args.framework}, SmolLM2-135M-Instruct, lr {args.lr:g}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row(
        f"reward before (step 1, v0, {episodes} episodes)", f"{metrics[0]['reward_mean']:.3f}"
    )
    table.add_row(
        f"reward after (step-{metrics[-1]['step']}, same rows, {after['episodes_ok']} episodes)",
        f"{after['reward_mean']:.3f}",
    )
    table.add_row(
        "generated tokens before / after (same rows)",
        f"{before['generated_tokens']} / {after['generated_tokens']}",
    )
    for part in ("rollout", "train", "sync"):
        seconds = statistics.fmean(m[f"{part}_seconds"] for m in metrics)
        table.add_row(f"{part} s per step (mean)", f"{seconds:.2f}")
    return table


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    python = framework_python(args, console)
    model = smollm2_dir(args, console)
    folder = ROOT / EXAMPLES[args.framework][0]
    out = Path(args.out).resolve() / time.strftime(f"rl-sanity-{args.framework}-%Y%m%d-%H%M%S")
    agent = f"{folder / 'agent.py'}:Agent"
    if not args.dry_run:
        out.mkdir(parents=True)

    def engine(weights: str) -> list[str]:
        return ["--engine", "transformers", "--model", weights,
                "--default-max-tokens", str(args.default_max_tokens)]  # fmt: skip

    train_seconds = run_logged(
        [str(python), "-m", "rltap.cli", "train", agent, "--data", str(folder / "data.jsonl"),
         "--out", str(out / "train"), "--steps", str(args.steps),
         "--rows-per-step", str(args.rows_per_step), "--group-size", str(args.group_size),
         "--lr", str(args.lr), "--seed", str(args.seed), "--save-every", str(args.steps),
         *engine(model)],
        out / "train.log", console, dry_run=args.dry_run,
    )  # fmt: skip
    rows = out / "eval-rows.jsonl"
    if not args.dry_run:
        first_rows(folder / "data.jsonl", args.rows_per_step, rows)
    eval_seconds = run_logged(
        [str(python), "-m", "rltap.cli", "rollout", agent, "--data", str(rows),
         "--out", str(out / "eval-after"), "--group-size", str(args.group_size),
         *engine(str(out / "train" / f"step-{args.steps}"))],
        out / "eval.log", console, dry_run=args.dry_run,
    )  # fmt: skip
    if args.dry_run:
        return 0
    lines = (out / "train" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    metrics = [json.loads(line) for line in lines if line]
    before, after = (
        json.loads(path.read_text(encoding="utf-8"))
        for path in (out / "train/rollouts/step-1/summary.json", out / "eval-after/summary.json")
    )
    shown = Console() if sys.stdout.isatty() else Console(width=160)
    shown.print(steps_table(metrics))
    shown.print(summary_table(args, metrics, before, after))
    shown.print(
        f"train {train_seconds:.0f} s (model load and checkpoint included), "
        f"evaluation {eval_seconds:.0f} s; files: {out} (train/ is the rltap train run folder: "
        "metrics.jsonl, tensorboard/, reward.png, step-N/; eval-after/ the rollout's)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
