"""The `rltap` command line (`main`) and its commands."""

from __future__ import annotations

from rltap.cli.commands import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
