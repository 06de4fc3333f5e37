"""docs/configuration.md is `rltap.config.reference`'s output: committed as generated, every flag
of each command on its page, and the defaults a command changes said where it changes them."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rltap.cli.commands import build_parser
from rltap.config.reference import COMMANDS, REGENERATE, Command, reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
# The subcommands whose flags are no configuration dataclass (docs/recording.md, engines.md).
OWN_FLAGS = {"export", "inspect", "view", "models"}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _part(page: str, heading: str) -> str:
    """The text under `heading` up to the next heading of any level."""
    start = page.index(f"\n{heading}\n") + len(heading) + 2
    end = re.search(r"^#", page[start:], re.MULTILINE)
    return page[start : start + end.start()] if end else page[start:]


def _listed(page: str, heading: str) -> set[str]:
    """The flags and arguments in the first column of `heading`'s table, and those of the
    sections it links to, followed down."""
    part = _part(page, heading)
    names = set()
    for row in part.splitlines():
        if row.startswith("| `"):
            names |= set(re.findall(r"`([^`]+)`", row.split(" | ")[0]))
    for section in re.findall(r"\]\(#(\w+)\)", part):
        (title,) = [
            h for h in re.findall(r"^### (\w+)$", page, re.MULTILINE) if h.lower() == section
        ]
        names |= _listed(page, f"### {title}")
    return names


def test_the_committed_page_is_the_generated_one() -> None:
    assert PAGE.read_text(encoding="utf-8") == reference(), (
        f"docs/configuration.md is stale: regenerate it with `{REGENERATE}`"
    )


def test_the_module_writes_the_page_to_stdout() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rltap.config.reference"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout == reference()


def test_every_subcommand_is_on_the_page_or_has_flags_of_its_own() -> None:
    assert set(_subparsers()) == {command.name for command in COMMANDS} | OWN_FLAGS


@pytest.mark.parametrize("command", [pytest.param(c, id=c.name) for c in COMMANDS])
def test_a_command_s_page_lists_exactly_its_flags(command: Command) -> None:
    name = command.name
    parser = _subparsers()[name]
    flags = {
        flag if action.option_strings else action.dest.upper()
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for flag in (action.option_strings or [action.dest])
    }
    listed = _listed(reference(), f"### `rltap {name}`")
    if command.config_file:
        assert "Reads `--config FILE`." in _part(reference(), f"### `rltap {name}`")
        listed.add("--config")
    assert listed == flags


def test_a_default_a_command_changes_is_said_on_its_page_and_the_section_keeps_its_own() -> None:
    page = reference()
    assert "`--group-size` `8`, `--seed` `0`" in _part(page, "### `rltap train`")
    assert "`--default-max-tokens` `128`" in _part(page, "### `rltap demo`")
    assert "| `--group-size` | integer | `1` |" in _part(page, "### EpisodeConfig")
    assert "| `--default-max-tokens` | integer | `4096` |" in _part(page, "### ChatConfig")


def test_each_section_is_listed_once_with_its_help_and_choices() -> None:
    page = reference()
    headings = re.findall(r"^### (\w+)$", page, re.MULTILINE)
    assert len(headings) == len(set(headings))
    engine = _part(page, "### EngineConfig")
    assert (
        "| `--engine` | `transformers`, `vllm`, `sglang`, `scripted` | `transformers` |" in engine
    )
    assert "| `--store-retention` | AGE\\|COUNT | none |" in _part(page, "### StoreConfig")
