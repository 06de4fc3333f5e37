"""FSDP2 trainer ranks (`rltap train --nproc-per-node N`) against one process, side by side in one
run: memory and step time per rank, bf16 against fp32, gradient checkpointing on against off.

What it runs: SmolLM2-135M-Instruct (as `make demo` converts it; --model otherwise), loaded in
fp32, trained by `PolicyTrainer.step` (AdamW on every weight, the `--algo grpo` update, micro-
batches of 2048 tokens) on the same fixed tree packs at every step: `--packs` GRPO groups, each a
shared prompt of about 250 tokens and 4 episodes of two calls (a reply, a tool result, a second
reply), about 1200 tokens a pack. Each variant is one launch of its ranks with
`rltap.train.launcher.launch` (the elastic launcher `rltap train --nproc-per-node` uses; fresh
processes, so each rank's peak RSS is its own), one torch thread per rank, the variants one after
the other:

    1 rank fp32         one process, no process group (world size 1)
    2 ranks fp32        FSDP2 over 2 gloo ranks, each layer then the root sharded
    2 ranks bf16        the same, --dtype bfloat16 (bf16 compute, fp32 master weights and AdamW)
    2 ranks fp32 ckpt   the same as fp32, --gradient-checkpointing

Each rank reports its peak RSS (`resource.getrusage`), the seconds of each step and the bytes it
holds of the model's parameters, their gradients and AdamW's state (a DTensor's local shard).
A step's time is the slowest rank's; the first step (AdamW's state allocated, the allocator warm)
is left out of the mean when there are more. Printed: a table of the variants and the ratios,
one verdict per goal: (a) 2 ranks / 1 process, model + optimizer state bytes per rank and peak
RSS per rank, at most 0.6x; (b) step time, 2 ranks of one thread each / one process of one
thread, at most 0.65x; (c) bf16 / fp32: peak RSS, state bytes and step time; (d) gradient
checkpointing on / off: peak RSS. The figures go to a JSON file (--json).

    .venv/bin/python bench/distributed_train.py [--packs 8] [--steps 2] [--model M]
        [--variants 1-fp32 2-fp32 2-bf16 2-fp32-ckpt] [--json runs/distributed-train.json]
    .venv/bin/python bench/distributed_train.py --steps 1 --packs 1 --prompt-tokens 40 \\
        --reply-tokens 20          # a smoke run: seconds, not minutes

`--reward-curves` runs something else, for minutes: the LangChain agent
(`examples/langchain_math/agent.py:ShapedAgent`, its `train.toml`, as bench/learn_frameworks.py
trains it) by a whole `rltap train` of `--curve-steps` steps (8) with `--dtype float32`, then the
same with `--dtype bfloat16` (same seed, same rows), in the LangChain venv (bench/rl_sanity.py's;
`--python` names another); printed: the two reward curves side by side, and a plot
(`reward-curves.png` in the runs' folder):

    .venv/bin/python bench/distributed_train.py --reward-curves [--curve-steps 8]
        [--curve-ranks 1] [--eval-rows 0] [--python .nox/integration-framework-langchain/bin/python]

The ranks share this machine's cores with whatever else runs on it: on a loaded host the step
times (b) move more than the memory figures.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rl_sanity import EXAMPLES, ROOT, framework_python, smollm2_dir

MB = 2**20
LR = 3e-5
STATE_GOAL = 0.6  # (a) 2 ranks / 1 process, bytes per rank
TIME_GOAL = 0.65  # (b) 2 ranks / 1 process, step time


@dataclass(frozen=True, slots=True)
class Variant:
    """One launch: `ranks` trainer ranks, the trainer's dtype, gradient checkpointing or not."""

    name: str
    ranks: int
    dtype: str = "float32"
    checkpointing: bool = False

    @property
    def needs_precision(self) -> bool:
        return self.dtype != "float32" or self.checkpointing


VARIANTS = {
    v.name: v
    for v in (
        Variant("1-fp32", 1),
        Variant("2-fp32", 2),
        Variant("2-bf16", 2, "bfloat16"),
        Variant("2-fp32-ckpt", 2, checkpointing=True),
    )
}


@dataclass(frozen=True, slots=True)
class PackShape:
    """The fixed tree packs: `packs` groups of `episodes` episodes, each two calls long."""

    packs: int = 8
    episodes: int = 4
    prompt_tokens: int = 250
    reply_tokens: int = 110
    tool_tokens: int = 30
    seed: int = 0


@dataclass(frozen=True, slots=True)
class RankJob:
    """What a rank runs: the model, the variant, the packs, the steps, where rank 0 reports."""

    model_dir: str
    variant: Variant
    shape: PackShape
    steps: int
    micro_batch_tokens: int
    progress_file: str


def bench_packs(shape: PackShape, vocab: int) -> list[Any]:
    """`shape.packs` tree packs, the same for a given shape: per pack a prompt sampled
    `episodes` times, each reply followed by a tool result and a second reply (a prefix link),
    rewards and behaviour logprobs of their own; replies vary around `reply_tokens`."""
    import numpy as np

    from rltap.record.pack import pack_interactions
    from rltap.testing.packs import recorded_call

    packs = []
    for index in range(shape.packs):
        rng = np.random.default_rng(shape.seed * 1000 + index)

        def tokens(count: int, rng: Any = rng) -> list[int]:
            return [int(t) for t in rng.integers(1, vocab, max(1, count))]

        def around(mean: int, rng: Any = rng) -> int:
            return int(rng.integers(max(1, mean * 6 // 10), mean * 14 // 10 + 1))

        prompt = tokens(shape.prompt_tokens)
        calls = []
        for _ in range(shape.episodes):
            first = recorded_call(prompt, tokens(around(shape.reply_tokens)))
            second = recorded_call(
                tokens(shape.tool_tokens), tokens(around(shape.reply_tokens)), first
            )
            calls += [first, second]
        rewards = {c.interaction_id: float(rng.uniform()) for c in calls}
        pack = pack_interactions(calls, rewards)
        generated = pack.loss_mask == 1
        pack.logprobs[generated] = -rng.uniform(0.05, 4.0, int(generated.sum()))
        packs.append(pack)
    return packs


def rank_main(job: RankJob) -> dict[str, Any]:
    """One trainer rank of a variant (the launcher's entry point): its steps on the fixed
    packs; its peak RSS, step seconds and state bytes."""
    import torch
    from transformers import AutoModelForCausalLM

    from rltap.config import UpdateConfig
    from rltap.train.launcher import process_group
    from rltap.train.trainer import PolicyTrainer

    torch.set_num_threads(1)
    with process_group() as ranks:
        torch.manual_seed(0)
        model: Any = AutoModelForCausalLM.from_pretrained(job.model_dir, dtype="float32")
        loaded = current_rss()
        packs = bench_packs(job.shape, model.config.vocab_size)
        update = UpdateConfig(lr=LR, micro_batch_tokens=job.micro_batch_tokens)
        trainer = PolicyTrainer(model, update, ranks=ranks, **precision_kwargs(job.variant))
        built = current_rss()
        seconds = []
        for step in range(job.steps):
            started = time.perf_counter()
            metrics = trainer.step(packs, version=0)
            seconds.append(time.perf_counter() - started)
            if ranks.rank == 0:
                with open(job.progress_file, "a", encoding="utf-8") as progress:
                    progress.write(f"{step + 1}\n")
        return {
            "rank": ranks.rank,
            "world": ranks.world,
            "seconds": seconds,
            "tokens": sum(len(p) for p in packs),
            "trained_tokens": metrics["tokens"],
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            # where the memory went: after the load, after the trainer (sharded), at the end
            "rss_loaded": loaded,
            "rss_built": built,
            "rss_end": current_rss(),
            **state_bytes(trainer),
        }


def current_rss() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def precision_kwargs(variant: Variant) -> dict[str, Any]:
    """`PolicyTrainer`'s precision argument for `variant` (none for plain fp32, so the bench
    runs on a trainer that takes none yet)."""
    if not variant.needs_precision:
        return {}
    from rltap.config.train import PrecisionConfig

    precision = PrecisionConfig(dtype=variant.dtype, gradient_checkpointing=variant.checkpointing)  # type: ignore[arg-type]
    return {"precision": precision}


def trainer_takes_precision() -> bool:
    """Whether `PolicyTrainer` takes `precision=` (issue 38's precision settings)."""
    from rltap.train.trainer import PolicyTrainer

    return "precision" in inspect.signature(PolicyTrainer).parameters


def state_bytes(trainer: Any) -> dict[str, int]:
    """The bytes this rank holds of the parameters, their gradients and AdamW's state (a
    DTensor's local shard only; a tied weight once)."""

    def local(tensor: Any) -> int:
        shard = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        return int(shard.numel() * shard.element_size())

    parameters = list(trainer.model.parameters())
    optimizer = [
        value
        for state in trainer.optimizer.state.values()
        for value in state.values()
        if hasattr(value, "numel") and value.dim() > 0
    ]
    return {
        "param_bytes": sum(local(p) for p in parameters),
        "grad_bytes": sum(local(p.grad) for p in parameters if p.grad is not None),
        "optimizer_bytes": sum(local(v) for v in optimizer),
    }


@dataclass(slots=True)
class Measured:
    """A variant's figures: the slowest rank's step time, the largest rank's memory."""

    variant: Variant
    ranks: list[dict[str, Any]]

    @property
    def step_seconds(self) -> float:
        per_step = [max(r["seconds"][i] for r in self.ranks) for i in range(self.steps)]
        timed = per_step[1:] if len(per_step) > 1 else per_step
        return statistics.fmean(timed)

    @property
    def steps(self) -> int:
        return len(self.ranks[0]["seconds"])

    @property
    def peak_rss(self) -> int:
        return max(r["peak_rss"] for r in self.ranks)

    @property
    def state(self) -> int:
        return max(r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"] for r in self.ranks)

    def figures(self) -> dict[str, Any]:
        return {
            "variant": asdict(self.variant),
            "step_seconds": self.step_seconds,
            "peak_rss_per_rank": self.peak_rss,
            "state_bytes_per_rank": self.state,
            "ranks": self.ranks,
        }


def run_variant(job: RankJob, progress: Progress, bar: TaskID) -> Measured:
    """`job`'s ranks launched and waited for, `bar` following rank 0's steps."""
    from rltap.train.launcher import launch

    done = threading.Event()

    def watch() -> None:
        path = Path(job.progress_file)
        while not done.wait(0.5):
            if path.exists():
                lines = path.read_text(encoding="utf-8").split()
                progress.update(bar, completed=len(lines))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        results = launch(rank_main, (job,), job.variant.ranks)
    finally:
        done.set()
        watcher.join()
    progress.update(bar, completed=job.steps)
    return Measured(job.variant, sorted(results, key=lambda r: r["rank"]))


def ratio(mine: float, base: float) -> float:
    return mine / base if base else float("nan")


def verdict(value: float, goal: float) -> str:
    return f"meets the goal (<= {goal}x)" if value <= goal else f"misses the goal (<= {goal}x)"


def ratio_lines(measured: dict[str, Measured]) -> tuple[list[str], dict[str, float]]:
    """One line per comparison the variants allow, with the goal's verdict; and the ratios."""
    lines, ratios = [], {}
    one, two = measured.get("1-fp32"), measured.get("2-fp32")
    if one and two:
        ratios["state_2_over_1"] = state = ratio(two.state, one.state)
        ratios["peak_rss_2_over_1"] = peak = ratio(two.peak_rss, one.peak_rss)
        ratios["step_time_2_over_1"] = seconds = ratio(two.step_seconds, one.step_seconds)
        lines += [
            f"(a) model + optimizer state per rank, 2 ranks / 1 process: {state:.2f}x, "
            f"{verdict(state, STATE_GOAL)}",
            # The goal is on the state; the peak also holds a micro-batch's activations, which
            # are as large on each rank as in one process (the same --micro-batch-tokens).
            f"(a) peak RSS per rank, 2 ranks / 1 process: {peak:.2f}x (measured; the goal is on "
            "the state: a micro-batch's activations are the same size on every rank)",
            f"(b) step time, 2 ranks (1 thread each) / 1 process (1 thread): {seconds:.2f}x, "
            f"{verdict(seconds, TIME_GOAL)}",
        ]
    bf16 = measured.get("2-bf16")
    if two and bf16:
        ratios["bf16_peak_rss"] = peak = ratio(bf16.peak_rss, two.peak_rss)
        ratios["bf16_state"] = state = ratio(bf16.state, two.state)
        ratios["bf16_step_time"] = seconds = ratio(bf16.step_seconds, two.step_seconds)
        lines.append(
            f"(c) bf16 / fp32 on 2 ranks: peak RSS {peak:.2f}x, state bytes {state:.2f}x, "
            f"step time {seconds:.2f}x (no goal: measured)"
        )
    ckpt = measured.get("2-fp32-ckpt")
    if two and ckpt:
        ratios["checkpointing_peak_rss"] = peak = ratio(ckpt.peak_rss, two.peak_rss)
        ratios["checkpointing_step_time"] = seconds = ratio(ckpt.step_seconds, two.step_seconds)
        lower = "lower: as it should" if peak < 1 else "not lower: check the setting"
        lines.append(
            f"(d) gradient checkpointing on / off on 2 ranks: peak RSS {peak:.2f}x ({lower}), "
            f"step time {seconds:.2f}x"
        )
    return lines, ratios


def variants_table(measured: dict[str, Measured], title: str) -> Table:
    table = Table(title=title)
    for column in ("variant", "ranks", "dtype", "ckpt", "tokens/step", "step s", "peak RSS MB",
                   "params MB", "grads MB", "AdamW MB", "state MB"):  # fmt: skip
        table.add_column(column, justify="right")
    for name, m in measured.items():
        r0 = max(m.ranks, key=lambda r: r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"])
        v = m.variant
        table.add_row(
            name, str(v.ranks), v.dtype, "on" if v.checkpointing else "off",
            str(m.ranks[0]["tokens"]), f"{m.step_seconds:.2f}", f"{m.peak_rss / MB:.0f}",
            f"{r0['param_bytes'] / MB:.0f}", f"{r0['grad_bytes'] / MB:.0f}",
            f"{r0['optimizer_bytes'] / MB:.0f}", f"{m.state / MB:.0f}",
        )  # fmt: skip
    return table


def memory_and_time(args: argparse.Namespace, console: Console) -> int:
    """Parts (a) to (d): each variant's launch, then the table, the verdicts and the JSON."""
    model = smollm2_dir(args, console)
    shape = PackShape(
        packs=args.packs,
        prompt_tokens=args.prompt_tokens,
        reply_tokens=args.reply_tokens,
        tool_tokens=args.tool_tokens,
    )
    chosen = [VARIANTS[name] for name in args.variants]
    if not trainer_takes_precision():
        skipped = [v.name for v in chosen if v.needs_precision]
        if skipped:
            console.print(
                f"[yellow]PolicyTrainer takes no precision= yet: {', '.join(skipped)} skipped"
            )
        chosen = [v for v in chosen if not v.needs_precision]
    measured: dict[str, Measured] = {}
    columns = (TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("steps"), TimeElapsedColumn())  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="distributed-train-") as scratch,
        Progress(*columns, console=console) as progress,
    ):
        bars = {v.name: progress.add_task(v.name, total=args.steps, start=False) for v in chosen}
        for v in chosen:
            progress.start_task(bars[v.name])
            job = RankJob(model, v, shape, args.steps, args.micro_batch_tokens,
                          str(Path(scratch) / f"{v.name}.progress"))  # fmt: skip
            measured[v.name] = run_variant(job, progress, bars[v.name])
    lines, ratios = ratio_lines(measured)
    packs = f"{shape.packs} packs of ~{measured[chosen[0].name].ranks[0]['tokens'] // shape.packs}"
    title = (f"distributed_train: SmolLM2-135M-Instruct, {packs} tokens, {args.steps} steps, "
             "1 torch thread per rank")  # fmt: skip
    table = variants_table(measured, title)
    table.caption = "\n".join(lines)
    shown = Console() if sys.stdout.isatty() else Console(width=160)
    shown.print(table)
    out = Path(args.json) if args.json else default_json()
    out.parent.mkdir(parents=True, exist_ok=True)
    figures = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "model": model,
        "packs": asdict(shape),
        "steps": args.steps,
        "micro_batch_tokens": args.micro_batch_tokens,
        "load_average": os.getloadavg(),
        "variants": {name: m.figures() for name, m in measured.items()},
        "ratios": ratios,
        "verdicts": lines,
    }
    out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    shown.print(f"figures: {out}")
    return 0


def default_json() -> Path:
    return ROOT / "runs" / time.strftime("distributed-train-%Y%m%d-%H%M%S.json")


# (e): the LangChain agent's reward curve, fp32 against bf16.

CURVE_DTYPES = ("float32", "bfloat16")


def curve_command(args: argparse.Namespace, python: Path, model: str, dtype: str, out: Path,
                  eval_rows: Path | None) -> list[str]:  # fmt: skip
    """`rltap train` of the LangChain example's ShapedAgent with its train.toml, in `dtype`."""
    folder = ROOT / EXAMPLES["langchain"][0]
    held_out = ["--eval-data", str(eval_rows)] if eval_rows else []
    return [
        str(python), "-m", "rltap.cli", "train", f"{folder / 'agent.py'}:ShapedAgent",
        "--config", str(folder / "train.toml"), "--data", str(folder / "train.jsonl"),
        *held_out, "--out", str(out), "--steps", str(args.curve_steps), "--seed", str(args.seed),
        "--save-every", str(args.curve_steps), "--model", model, "--dtype", dtype,
        "--nproc-per-node", str(args.curve_ranks),
    ]  # fmt: skip


async def run_curves(runs: dict[str, tuple[list[str], Path]], steps: int, console: Console) -> None:
    """The runs one after the other (each on the machine alone), a bar of each one's steps."""
    from rltap_dev.demo_train import child_failure, logged_child, watch_steps

    columns = (TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("steps"), TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console) as progress:
        bars = {dtype: progress.add_task(dtype, total=steps, start=False) for dtype in runs}
        for dtype, (command, folder) in runs.items():
            progress.console.print(f"$ {' '.join(command)}", style="dim", soft_wrap=True)
            progress.start_task(bars[dtype])
            log = folder.parent / "train.log"
            child = logged_child(command, log, ROOT, HF_HUB_DISABLE_PROGRESS_BARS="1")
            async with child as process:
                code = await watch_steps(process, folder, progress, bars[dtype])
            progress.stop_task(bars[dtype])
            if code != 0:
                raise SystemExit(f"{dtype} run: {child_failure(code, log)}")


def curves_table(metrics: dict[str, list[dict[str, Any]]]) -> Table:
    table = Table(title="distributed_train --reward-curves: LangChain ShapedAgent, reward per step")
    evaluated = any("eval_reward" in m for rows in metrics.values() for m in rows)
    table.add_column("step", justify="right")
    for dtype in metrics:
        table.add_column(f"{dtype} reward", justify="right")
    if evaluated:
        for dtype in metrics:
            table.add_column(f"{dtype} eval", justify="right")
    for dtype in metrics:
        table.add_column(f"{dtype} train s", justify="right")
    by_step = {dtype: {m["step"]: m for m in rows} for dtype, rows in metrics.items()}
    steps = sorted({step for rows in by_step.values() for step in rows})

    def cell(dtype: str, step: int, key: str, form: str) -> str:
        m = by_step[dtype].get(step, {})
        return format(m[key], form) if key in m else ""

    for step in steps:
        table.add_row(
            str(step), *(cell(d, step, "reward_mean", ".3f") for d in metrics),
            *((cell(d, step, "eval_reward", ".3f") for d in metrics) if evaluated else ()),
            *(cell(d, step, "train_seconds", ".1f") for d in metrics),
        )  # fmt: skip
    means = []
    for dtype, rows in metrics.items():
        rewards = [m["reward_mean"] for m in rows if "reward_mean" in m]
        seconds = [m["train_seconds"] for m in rows if "train_seconds" in m]
        if rewards:
            means.append(
                f"{dtype}: mean reward {statistics.fmean(rewards):.3f}, first {rewards[0]:.3f}, "
                f"last {rewards[-1]:.3f}, train {statistics.fmean(seconds):.1f} s a step"
            )
    table.caption = "\n".join(means)
    return table


def plot_curves(metrics: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    for dtype, rows in metrics.items():
        points = [m for m in rows if "reward_mean" in m]
        axes.plot([m["step"] for m in points], [m["reward_mean"] for m in points], marker="o",
                  label=f"{dtype} (train reward)")  # fmt: skip
        held = [m for m in rows if "eval_reward" in m]
        if held:
            axes.plot([m["step"] for m in held], [m["eval_reward"] for m in held], marker="x",
                      linestyle="--", label=f"{dtype} (held-out)")  # fmt: skip
    axes.set(xlabel="step", ylabel="reward", ylim=(0, 1),
             title="LangChain agent on SmolLM2-135M-Instruct: bf16 vs fp32")  # fmt: skip
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def reward_curves(args: argparse.Namespace, console: Console) -> int:
    """Part (e): the two `rltap train` runs, their curves side by side, the plot."""
    from rltap.train.run_dir import read_metrics

    args.framework = "langchain"
    python = framework_python(args, console)
    model = smollm2_dir(args, console)
    out = Path(args.out).resolve() / time.strftime("distributed-train-curves-%Y%m%d-%H%M%S")
    runs = {}
    for dtype in CURVE_DTYPES:
        folder = out / dtype
        eval_rows = None
        if args.eval_rows:
            eval_rows = folder / "eval-rows.jsonl"
        if not args.dry_run:
            folder.mkdir(parents=True)
            if eval_rows:
                lines = (ROOT / EXAMPLES["langchain"][0] / "eval.jsonl").read_text().splitlines()
                eval_rows.write_text("".join(f"{line}\n" for line in lines[: args.eval_rows]))
        runs[dtype] = (curve_command(args, python, model, dtype, folder / "train", eval_rows),
                       folder / "train")  # fmt: skip
    if args.dry_run:
        for command, _ in runs.values():
            console.print(f"$ {' '.join(command)}", style="dim", soft_wrap=True)
        return 0
    started = time.monotonic()
    asyncio.run(run_curves(runs, args.curve_steps, console))
    metrics = {dtype: read_metrics(folder) for dtype, (_, folder) in runs.items()}
    shown = Console() if sys.stdout.isatty() else Console(width=160)
    shown.print(curves_table(metrics))
    plot = plot_curves(metrics, out / "reward-curves.png")
    (out / "curves.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    minutes = (time.monotonic() - started) / 60
    shown.print(f"{minutes:.1f} min; plot: {plot}; figures: {out / 'curves.json'}; runs: {out}")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model folder (default: the cached SmolLM2 conversion)")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=2, help="trainer steps per variant")
    parser.add_argument("--packs", type=int, default=8, help="tree packs per step")
    parser.add_argument("--prompt-tokens", type=int, default=250)
    parser.add_argument("--reply-tokens", type=int, default=110, help="mean reply length")
    parser.add_argument("--tool-tokens", type=int, default=30)
    parser.add_argument("--micro-batch-tokens", type=int, default=2048)
    parser.add_argument("--json", help="where the figures go (default runs/distributed-train-*)")
    curves = parser.add_argument_group("(e) reward curves, bf16 vs fp32")
    curves.add_argument("--reward-curves", action="store_true",
                        help="run the two rltap train runs instead of (a)-(d)")  # fmt: skip
    curves.add_argument("--curve-steps", type=int, default=8)
    curves.add_argument("--curve-ranks", type=int, default=1, help="--nproc-per-node of each")
    curves.add_argument("--eval-rows", type=int, default=0,
                        help="held-out rows evaluated greedily (default 0: none)")  # fmt: skip
    curves.add_argument("--seed", type=int, default=0)
    curves.add_argument("--python", help="the LangChain venv's Python (default: its nox venv)")
    curves.add_argument("--out", default="runs", help="parent folder of the runs")
    curves.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.packs < 1:
        parser.error("--steps and --packs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True)
    if args.reward_curves:
        return reward_curves(args, console)
    return memory_and_time(args, console)


if __name__ == "__main__":
    raise SystemExit(main())
