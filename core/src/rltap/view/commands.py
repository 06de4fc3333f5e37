"""`rltap view SOURCE`: the trajectory viewer on a local port (a command of `rltap.cli`). A SOURCE
that holds no capture store is a `ConfigError`, which `rltap.cli` reports."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rltap.config.flags import ConfigError

__all__ = ["add_view_command"]


def add_view_command(subparsers: Any) -> None:
    view = subparsers.add_parser(
        "view",
        help="browse runs, sessions, conversation trees and tokens in a local web page",
        description="Serve the trajectory viewer for SOURCE (a capture store, a run folder "
        "holding capture.sqlite, or a folder of runs) on 127.0.0.1: the sessions (sort, "
        "filter), each session's conversation tree with its rewards before and after "
        "discounting, each call's messages and tokens coloured by logprob, the reward "
        "histogram and, for rltap train runs, the reward per step. Works offline.",
    )
    view.add_argument("source", type=Path, help="capture store, run folder or folder of runs")
    view.add_argument(
        "--host", default="127.0.0.1",
        help="bind address (default 127.0.0.1; the viewer has no authentication)",
    )  # fmt: skip
    view.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    view.add_argument(
        "--tokenizer", type=Path, default=None,
        help="tokenizer folder for token texts (default: the one the proxy recorded with)",
    )  # fmt: skip
    view.set_defaults(handler=_view)


def _view(args: argparse.Namespace) -> int:
    import uvicorn

    from rltap.view.app import create_view_app

    try:
        app = create_view_app(args.source, args.tokenizer)
    except (FileNotFoundError, ValueError) as exc:  # no store there, or not one
        raise ConfigError(str(exc)) from exc
    print(f"rltap viewer on http://{args.host}:{args.port} ({args.source})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
