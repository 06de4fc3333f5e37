"""Does `rltap train`'s heap trim after each step (`rltap.train.memory`) keep a run's memory flat,
and at what cost in step time? The same training steps with glibc's default heap and trimmed,
side by side.

Each variant is a subprocess of its own, both running at once (one torch thread each, so the two
cores are shared alike): SmolLM2-135M-Instruct (as `make demo` converts it; --model otherwise)
loaded in fp32, `PolicyTrainer.step` (AdamW on every weight, lr 3e-5) on the tree packs a real run
collected, step k on `RUN/rollouts/step-k/` (each step's episodes have their own lengths, which
is what fragments the heap). After each step the process's RSS and peak RSS are read; the table
shows them per step and the trimmed run's ratios at the end.

    .venv/bin/python bench/train_memory.py [--run RUN] [--steps 8] [--model M]

RUN is a `rltap train` run folder with `rollouts/step-1/` .. `step-N/` (default: the newest
LangChain seed bench/learn_frameworks.py left under runs/).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rl_sanity import ROOT, smollm2_dir

VARIANTS = ("default", "trim")
LR = 3e-5


def newest_run() -> Path | None:
    runs = sorted((ROOT / "runs").glob("learn-frameworks-*/langchain/seed-*/train"))
    return runs[-1] if runs else None


def child(variant: str, run: Path, steps: int, model_dir: str) -> None:
    """One variant's steps; a JSON line per step on stdout."""
    import torch
    from transformers import AutoModelForCausalLM

    from rltap.config import UpdateConfig
    from rltap.record.pack_io import load_packs
    from rltap.rollout.runner import BATCH
    from rltap.train.memory import trim_heap
    from rltap.train.trainer import PolicyTrainer

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    trainer = PolicyTrainer(model, UpdateConfig(lr=LR))
    page = resource.getpagesize()
    for step in range(1, steps + 1):
        packs = load_packs(run / "rollouts" / f"step-{step}" / BATCH)
        started = time.perf_counter()
        trainer.step(packs, step - 1)
        if variant == "trim":
            trim_heap()
        seconds = time.perf_counter() - started
        with open("/proc/self/statm", encoding="ascii") as statm:
            rss = int(statm.read().split()[1]) * page
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        tokens = sum(len(p) for p in packs)
        line = {"step": step, "tokens": tokens, "seconds": seconds, "rss": rss, "peak": peak}
        print(json.dumps(line), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="a rltap train run folder (see above)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--model", help="model folder (default: the cached SmolLM2 conversion)")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.dry_run = False
    console = Console(stderr=True)
    run = args.run or newest_run()
    if run is None or not (run / "rollouts" / f"step-{args.steps}").is_dir():
        raise SystemExit(f"no run with {args.steps} steps of rollouts: give --run RUN")
    model = smollm2_dir(args, console)
    if args.child:
        child(args.child, run, args.steps, model)
        return 0
    console.print(f"{run}: {args.steps} trainer steps, the heap as it is and trimmed, at once")
    script = [sys.executable, __file__, "--run", str(run), "--steps", str(args.steps)]
    env = {**os.environ, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    lines: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with Progress(*Progress.get_default_columns(), console=console) as progress:

        def follow(variant: str) -> int:
            command = [*script, "--model", model, "--child", variant]
            bar = progress.add_task(f"{variant} heap", total=args.steps)
            with subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True) as child:
                assert child.stdout is not None
                for line in child.stdout:
                    lines[variant].append(json.loads(line))
                    progress.advance(bar)
            return child.returncode

        with ThreadPoolExecutor(len(VARIANTS)) as pool:
            codes = dict(zip(VARIANTS, pool.map(follow, VARIANTS), strict=True))
    for variant, code in codes.items():
        if code != 0:
            raise SystemExit(f"the {variant} variant failed (exit {code})")
    Console().print(memory_table(lines))
    return 0


def memory_table(lines: dict[str, list[dict[str, float]]]) -> Table:
    gib = 2**30
    table = Table(title="train_memory: RSS (GiB) and seconds per trainer step, per heap")
    table.add_column("step", justify="right")
    table.add_column("tokens", justify="right")
    for variant in VARIANTS:
        table.add_column(f"{variant} RSS", justify="right")
    for variant in VARIANTS:
        table.add_column(f"{variant} s", justify="right")
    for step, rows in enumerate(zip(*(lines[v] for v in VARIANTS), strict=True), start=1):
        table.add_row(
            str(step), str(rows[0]["tokens"]), *(f"{r['rss'] / gib:.2f}" for r in rows),
            *(f"{r['seconds']:.1f}" for r in rows),
        )  # fmt: skip
    default = lines["default"]
    ratios = []
    for variant in VARIANTS[1:]:
        mine = lines[variant]
        peak = mine[-1]["peak"] / default[-1]["peak"]
        last = mine[-1]["rss"] / default[-1]["rss"]
        seconds = sum(m["seconds"] for m in mine) / sum(d["seconds"] for d in default)
        ratios.append(
            f"{variant} / default: peak RSS {peak:.2f}x, RSS after the last step {last:.2f}x, "
            f"step time {seconds:.2f}x"
        )
    table.caption = "\n".join(ratios)
    return table


if __name__ == "__main__":
    raise SystemExit(main())
