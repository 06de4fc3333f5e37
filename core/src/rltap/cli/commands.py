"""The `rltap` command line: `rltap serve`, `rltap rollout`, `rltap eval`, `rltap train`,
`rltap export`, `rltap inspect`, `rltap view`, `rltap models tokenizer|tiny DIR`, and the commands
other installed packages add by a `rltap.commands` entry point (this repository's `rltap demo`).

Each top-level subcommand is one `_add_<name>_command(subparsers)` function that registers its
parser and sets `handler` to a function `(args) -> int`; `COMMANDS` lists them in help order.
Heavy imports happen inside handlers so `rltap --help` stays fast.

The library raises, it never exits: `main` is the one place an error becomes the process's exit
status. A refused setting (`ConfigError`) or any other `RltapError` a command raises ends it
with status 2, argparse's for a usage error, and `rltap <command>: <message>` on stderr; an
engine server rltap started that failed (`EngineServerFailed`: it exited, or never became
healthy) with status 4 (`EXIT_ENGINE`) and its log's last lines.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

from rltap._lazy import require_module
from rltap.config import (
    ConfigError,
    EvalConfig,
    RolloutConfig,
    ServerConfig,
    TrainConfig,
    add_arguments,
    parse,
)
from rltap.record.errors import EngineServerFailed, ProxyStartFailed, RltapError, Terminated
from rltap.rollout.evaluate import eval_command
from rltap.rollout.ray.runs import ray_rollout
from rltap.rollout.runner import rollout_command
from rltap.store.commands import add_export_command, add_inspect_command
from rltap.view.commands import add_view_command

__all__ = ["COMMANDS", "EXIT_ENGINE", "EXIT_ERROR", "build_parser", "main"]

# The exit status of a command that raised rltap's error: argparse's for a refused flag.
EXIT_ERROR = 2
# ... of a proxy that did not start (uvicorn's own status for it) ...
EXIT_PROXY = 3
# ... and of one whose launched engine server failed.
EXIT_ENGINE = 4

T = TypeVar("T")

_Subparsers = Any  # argparse's _SubParsersAction is private


def _add_models_command(subparsers: _Subparsers) -> None:
    models = subparsers.add_parser(
        "models",
        help="build offline test assets (tokenizer, tiny model)",
        description="Build offline test assets; nothing is downloaded.",
    )
    kinds = models.add_subparsers(dest="kind", metavar="KIND", required=True)

    tokenizer = kinds.add_parser(
        "tokenizer", help="a Qwen2.5/Qwen3-compatible fast tokenizer with rltap's chat template"
    )
    tokenizer.add_argument("dir", type=Path, help="output folder (created if missing)")
    tokenizer.set_defaults(handler=_models_tokenizer)

    tiny = kinds.add_parser(
        "tiny", help="a tiny random Qwen2ForCausalLM (fp32 safetensors) with that tokenizer"
    )
    tiny.add_argument("dir", type=Path, help="output folder (created if missing)")
    tiny.add_argument("--seed", type=int, default=0, help="weight seed (default: 0)")
    tiny.add_argument(
        "--tokenizer-dir",
        type=Path,
        default=None,
        help="copy the tokenizer from this folder instead of building it",
    )
    tiny.set_defaults(handler=_models_tiny)


def _models_tokenizer(args: argparse.Namespace) -> int:
    from rltap.testing.models import build_qwen_tokenizer

    started = time.perf_counter()
    out = build_qwen_tokenizer(args.dir)
    print(f"wrote Qwen tokenizer to {out} in {time.perf_counter() - started:.1f}s")
    return 0


def _models_tiny(args: argparse.Namespace) -> int:
    from rltap.testing.models import build_tiny_model

    started = time.perf_counter()
    out = build_tiny_model(args.dir, args.seed, tokenizer_dir=args.tokenizer_dir)
    elapsed = time.perf_counter() - started
    print(f"wrote tiny Qwen2 model (seed {args.seed}) to {out} in {elapsed:.1f}s")
    return 0


def _add_serve_command(subparsers: _Subparsers) -> None:

    serve = subparsers.add_parser(
        "serve",
        help="run the proxy in front of an inference engine",
        description="Run the OpenAI/Anthropic-compatible proxy that records every call at the "
        "token level. The admin key comes from --admin-key, else RLTAP_ADMIN_KEY, else it is "
        "generated and printed; a known or short key is refused beyond loopback.",
    )
    add_arguments(serve, ServerConfig, config_file=True)
    serve.set_defaults(handler=_serve, command_parser=serve)


def _require_server(command: str) -> None:
    """A command that runs the proxy exits naming the `server` extra where it is missing (the
    slim install), instead of with a traceback."""
    try:
        for module in ("fastapi", "uvicorn", "transformers"):
            require_module(module, "rltap[server]", f"rltap {command}")
    except ImportError as exc:
        raise SystemExit(str(exc)) from None


def _parsed(cls: type[T], args: argparse.Namespace) -> T:
    """The command's settings parsed again with its `--config` file's keys as the defaults of
    the flags not given (precedence: command line, file, default)."""
    required = getattr(cls, "REQUIRED_TOO", ())
    return parse(cls, args.command_parser, args.argv[1:], required=required)


def _serve(args: argparse.Namespace) -> int:
    _require_server("serve")
    from rltap.proxy import run_serve

    return run_serve(_parsed(ServerConfig, args))


def _add_rollout_command(subparsers: _Subparsers) -> None:

    rollout = subparsers.add_parser(
        "rollout",
        help="run an agent over a JSONL dataset and write trajectories",
        description="Run AGENT (pkg.module:Name or path/agent.py:Name, with async run(data, "
        "**kwargs)) on every row of --data through the proxy: an in-process engine and proxy "
        "unless --proxy is given. Writes trajectories.jsonl, batch.safetensors and summary.json "
        "to --out; running again with the same --out resumes.",
    )
    add_arguments(rollout, RolloutConfig, config_file=True)
    rollout.set_defaults(handler=_rollout, command_parser=rollout)


def _rollout(args: argparse.Namespace) -> int:
    _require_server("rollout")
    config = _parsed(RolloutConfig, args)
    if config.ray.ray is not None:
        return rollout_command(config, ray_rollout)
    return rollout_command(config)


def _add_eval_command(subparsers: _Subparsers) -> None:

    evaluate = subparsers.add_parser(
        "eval",
        help="score an agent on held-out rows: mean reward, pass@k",
        description="Run AGENT on every row of --data as `rltap rollout` does, --group-size K "
        "samples a row, every call at --temperature (--greedy: 0) whatever the agent asks; "
        "print the mean reward and pass@1 .. pass@K (a sample passes when its reward is >= "
        "--pass-threshold) and write eval.json beside the rollout's files in --out.",
    )
    add_arguments(evaluate, EvalConfig, config_file=True)
    evaluate.set_defaults(handler=_eval, command_parser=evaluate)


def _eval(args: argparse.Namespace) -> int:
    _require_server("eval")
    return eval_command(_parsed(EvalConfig, args))


def _add_train_command(subparsers: _Subparsers) -> None:

    train = subparsers.add_parser(
        "train",
        help="train a model on an agent's episodes (rollouts, update, weight sync)",
        description="Run AGENT's episodes on --data through the proxy, train --model on the "
        "recorded tokens (tree-packed, clipped policy gradient), push the new weights to the "
        "engine, repeat for --steps. Writes metrics.jsonl, tensorboard/, reward.png and "
        "step-N/ checkpoints to --out; running again on the same --out resumes. Every flag "
        "can also be a key in a YAML or TOML --config file.",
    )
    add_arguments(train, TrainConfig, config_file=True)
    train.set_defaults(handler=_train, command_parser=train)


def _train(args: argparse.Namespace) -> int:
    _require_server("train")
    from rltap.train.command import train_command

    return train_command(_parsed(TrainConfig, args))


def _add_store_commands(subparsers: _Subparsers) -> None:
    """`rltap export`, `rltap inspect` and `rltap view`: reading capture stores
    (`rltap.store`, `rltap.view`)."""

    add_export_command(subparsers)
    add_inspect_command(subparsers)
    add_view_command(subparsers)


COMMANDS: tuple[Callable[[_Subparsers], None], ...] = (
    _add_serve_command,
    _add_rollout_command,
    _add_eval_command,
    _add_train_command,
    _add_store_commands,
    _add_models_command,
)


def build_parser() -> argparse.ArgumentParser:
    """The full `rltap` argument parser."""
    parser = argparse.ArgumentParser(
        prog="rltap", description="Token-level capture of agent LLM calls for RL training."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_command in COMMANDS:
        add_command(subparsers)
    for entry in entry_points(group="rltap.commands"):  # e.g. rltap-dev's `rltap demo`
        entry.load()(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (also used as the console script). An
    error ends it as argparse's do: the message on stderr, `SystemExit(EXIT_ERROR)`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # `rltap train` parses its own again, its --config file's keys as defaults
    handler: Callable[[argparse.Namespace], int] = args.handler

    try:
        return handler(args)
    except (ConfigError, RltapError) as exc:  # a refused setting, or what rltap says failed
        print(f"rltap {args.command}: {exc}", file=sys.stderr)
        raise SystemExit(_exit_status(exc)) from None
    except Terminated as exc:  # SIGTERM while rltap held servers: they are stopped now
        raise SystemExit(128 + exc.signum) from None


def _exit_status(error: Exception) -> int:
    if isinstance(error, EngineServerFailed):
        return EXIT_ENGINE
    if isinstance(error, ProxyStartFailed):
        return EXIT_PROXY
    return EXIT_ERROR
