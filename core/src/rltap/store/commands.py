"""The store's subcommands: `rltap export SOURCE` and `rltap inspect SOURCE` (registered by
`rltap.cli.commands`; `rltap view` is `rltap.view.commands`). A SOURCE that holds no capture
store, or a flag out of range, is a `ConfigError`, which `rltap.cli` reports."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, get_args

from rich.console import Console

from rltap.config.flags import ConfigError
from rltap.store.files import FILE_FORMATS, export_store
from rltap.store.read import StoreReader
from rltap.store.summary import summary_table
from rltap.tree.export import ExportStyle

__all__ = ["add_export_command", "add_inspect_command"]


def add_export_command(subparsers: Any) -> None:
    export = subparsers.add_parser(
        "export",
        help="write a capture store's sessions as Parquet, JSONL or safetensors",
        description="Export every session of SOURCE (a capture store, or a run folder holding "
        "capture.sqlite) in an export style, rewards discounted along each tree. Parquet and "
        "JSONL: one row per interaction (concat: per branch; tree: per session), token "
        "columns as lists; safetensors: the padded batch (tree: one pack per session).",
    )
    export.add_argument("source", type=Path, help="capture store file or run folder")
    export.add_argument("--format", choices=FILE_FORMATS, default="parquet", dest="file_format")
    export.add_argument("--style", choices=get_args(ExportStyle), default="individual")
    export.add_argument("--discount", type=float, default=1.0, help="turn discount (default 1)")
    export.add_argument("--pad-token-id", type=int, default=0, help="safetensors padding id")
    export.add_argument("--out", type=Path, required=True, help="the file to write")
    export.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    if not 0.0 <= args.discount <= 1.0:
        msg = f"--discount must be in [0, 1], got {args.discount}"
        raise ConfigError(msg)
    started = time.perf_counter()
    try:
        written = export_store(
            args.source, args.out, args.file_format, args.style, args.discount, args.pad_token_id
        )
    except (FileNotFoundError, ValueError) as exc:  # no store there, or not one
        raise ConfigError(str(exc)) from exc
    elapsed = time.perf_counter() - started
    print(
        f"wrote {written.rows:,} rows of {written.sessions:,} sessions to {written.path} "
        f"({args.file_format}, style {args.style}) in {elapsed:.1f}s"
    )
    return 0


def add_inspect_command(subparsers: Any) -> None:
    inspect = subparsers.add_parser(
        "inspect",
        help="summarise a capture store: sessions, calls, tokens, rewards",
        description="Print what SOURCE (a capture store, or a run folder holding "
        "capture.sqlite) holds: sessions by state, calls complete and failed, tokens, the "
        "sessions' reward and the policy versions of their tokens.",
    )
    inspect.add_argument("source", type=Path, help="capture store file or run folder")
    inspect.set_defaults(handler=_inspect)


def _inspect(args: argparse.Namespace) -> int:

    try:
        reader = StoreReader(args.source)
    except (FileNotFoundError, ValueError) as exc:  # no store there, or not one
        raise ConfigError(str(exc)) from exc
    with reader:
        Console().print(summary_table(f"rltap inspect: {reader.path}", reader.summaries()))
    return 0
