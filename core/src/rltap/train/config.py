"""`rltap train`'s flags, and the same keys in a YAML or TOML file (`--config FILE`).

A key is a flag's name without the leading dashes, with dashes or underscores
(`rows-per-step: 4` or `rows_per_step = 4`); the engine flags of `rltap serve` are keys too
(`engine`, `url`, `num-threads`, ...), and so are the positional agent (`agent`) and
`data`/`model`/`out`. Precedence: a flag on the command line, then the file, then the default.
An unknown key is an error naming it.

    rltap train examples/train_toy/agent.py:Agent --data rows.jsonl --model DIR --out RUN \\
        --steps 20 --rows-per-step 2 --group-size 8 --lr 1e-3
    rltap train --config run.yaml --steps 40      # the file's settings, 40 steps
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltap.train.loss import LossSettings

if TYPE_CHECKING:
    from rltap.train.trainer import TrainSettings

__all__ = ["add_train_arguments", "parse_with_config", "train_settings"]

# Keys that name things rather than settings; `rltap train` needs each, from a flag or the file.
REQUIRED = ("agent", "data", "model", "out")


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Every `rltap train` flag (the engine's come from `rltap.proxy.add_serve_arguments`)."""
    from rltap.distributed.options import add_ray_arguments
    from rltap.proxy import add_serve_arguments

    parser.add_argument("agent", nargs="?", help="pkg.module:Name or path/to/agent.py:Name")
    parser.add_argument("--config", type=Path, help="YAML or TOML file with these keys")
    parser.add_argument("--data", help="JSONL dataset, one row per line")
    parser.add_argument("--out", help="run folder (a second run on it resumes)")
    run = parser.add_argument_group("loop")
    run.add_argument("--steps", type=int, default=10, help="updates (default 10)")
    run.add_argument("--rows-per-step", type=int, default=4, help="dataset rows per step")
    run.add_argument("--group-size", type=int, default=8, help="episodes per row (default 8)")
    run.add_argument("--concurrency", type=int, default=8, help="rows at once")
    run.add_argument("--mode", choices=["inline", "subproc"], default="inline")
    run.add_argument("--discount", type=float, default=1.0, help="turn discount along the tree")
    run.add_argument("--episode-timeout", type=float, default=None, help="seconds")
    run.add_argument(
        "--async", dest="async_rollouts", action="store_true",
        help="run the next step's rollouts while this step trains (needs --max-staleness >= 1)",
    )  # fmt: skip
    run.add_argument("--max-staleness", type=int, default=1, help="versions (default 1)")
    run.add_argument("--save-every", type=int, default=1, help="checkpoint every N steps")
    run.add_argument("--seed", type=int, default=0, help="torch seed of the trainer")
    algo = parser.add_argument_group("update")
    algo.add_argument(
        "--algo", choices=["grpo", "ppo"], default="grpo",
        help="grpo: advantages normalised per group, one update per step; ppo: normalised over "
        "the step, --minibatches updates per step (default 4)",
    )  # fmt: skip
    algo.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate")
    algo.add_argument("--weight-decay", type=float, default=0.0)
    algo.add_argument("--clip", type=float, default=0.2, help="ratio clip (default 0.2)")
    algo.add_argument("--behaviour-cap", type=float, default=5.0, help="behaviour weight cap")
    algo.add_argument("--kl-coef", type=float, default=0.0, help="KL to the initial model")
    algo.add_argument("--max-grad-norm", type=float, default=1.0)
    algo.add_argument("--minibatches", type=int, default=None, help="updates per step")
    algo.add_argument("--micro-batch-tokens", type=int, default=2048, help="tokens per forward")
    algo.add_argument("--temperature", type=float, default=1.0, help="the agents' sampling T")
    add_serve_arguments(parser)
    add_ray_arguments(parser)


def parse_with_config(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """`argv` parsed with the `--config` file's keys as defaults, then checked."""
    args = parser.parse_args(argv)
    if args.config is not None:
        values = _read(args.config)
        known = set(vars(parser.parse_args([])))  # every destination, at its default
        unknown = sorted(key for key in values if key not in known)
        if unknown:
            parser.error(f"{args.config}: unknown keys {unknown}")
        parser.set_defaults(**values)
        args = parser.parse_args(argv)
    missing = [name for name in REQUIRED if getattr(args, name) in (None, "")]
    if missing:
        parser.error("missing " + ", ".join(f"--{m}" if m != "agent" else "AGENT" for m in missing))
    for name in ("steps", "rows_per_step", "group_size", "concurrency", "save_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if isinstance(args.ray, bool):  # a file's `ray: true` is a local cluster, `false` none
        args.ray = "" if args.ray else None
    if args.async_rollouts and args.max_staleness < 1:
        parser.error("--async trains on tokens one version old: it needs --max-staleness >= 1")
    return args


def train_settings(args: argparse.Namespace) -> TrainSettings:
    """The update's settings from the parsed flags (`--algo` picks the defaults it implies)."""
    from rltap.train.trainer import TrainSettings  # torch: only once training starts

    ppo = args.algo == "ppo"
    minibatches = args.minibatches if args.minibatches is not None else (4 if ppo else 1)
    return TrainSettings(
        lr=args.lr,
        weight_decay=args.weight_decay,
        max_grad_norm=args.max_grad_norm,
        micro_batch_tokens=args.micro_batch_tokens,
        minibatches=max(1, minibatches),
        max_staleness=args.max_staleness,
        temperature=args.temperature,
        advantages="batch" if ppo else "group",
        loss=LossSettings(clip=args.clip, behaviour_cap=args.behaviour_cap, kl_coef=args.kl_coef),
    )


def _read(path: Path) -> dict[str, Any]:
    """A config file's keys, dashes as underscores (argparse's destinations)."""
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        raw = yaml.safe_load(text) or {}
    elif path.suffix == ".toml":
        raw = tomllib.loads(text)
    else:
        msg = f"{path}: a config file is .yaml, .yml or .toml"
        raise SystemExit(msg)
    if not isinstance(raw, dict):
        msg = f"{path}: expected a mapping of keys to values"
        raise SystemExit(msg)
    renamed = {"async": "async_rollouts"}
    return {renamed.get(str(k), str(k)).replace("-", "_"): v for k, v in raw.items()}
