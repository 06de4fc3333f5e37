"""rltap-dev, the repository's tools: `rltap demo` reaches rltap's command line by the
`rltap.commands` entry point, and rltap's own package carries none of the tools."""

from __future__ import annotations

import importlib.util
from importlib.metadata import entry_points

import pytest

from rltap.cli.commands import COMMANDS, build_parser


def test_rltap_demo_is_added_by_rltap_devs_entry_point() -> None:
    (demo,) = [e for e in entry_points(group="rltap.commands") if e.name == "demo"]
    assert demo.value == "rltap_dev.commands:add_demo_command"
    args = build_parser().parse_args(["demo", "--tiny", "--frameworks", "camel"])
    assert args.command == "demo"
    assert args.tiny
    assert args.frameworks == ["camel"]


def test_rltaps_own_commands_do_not_include_the_demo() -> None:
    names = [add_command.__name__ for add_command in COMMANDS]
    assert not any("demo" in name for name in names), names


@pytest.mark.parametrize(
    "module",
    [
        "rltap.cli.demo",
        "rltap.cli.demo_model",
        "rltap.cli.demo_train",
        "rltap.testing.matrix",
        "rltap.testing.readme",
    ],
)
def test_the_repository_tools_are_not_in_rltaps_package(module: str) -> None:
    assert importlib.util.find_spec(module) is None
