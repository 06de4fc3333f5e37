"""The `rltap` command line (`main`) and the commands that only it runs (`rltap demo`)."""

from __future__ import annotations

from rltap.cli.commands import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
