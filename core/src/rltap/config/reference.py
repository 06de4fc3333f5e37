"""The settings reference, `docs/configuration.md`, written from the configuration dataclasses.

    python -m rltap.config.reference > docs/configuration.md

Each command's page lists the settings its own dataclass declares and the sections it embeds;
each section is listed once, with every flag, its value, its default and its help text as the
field's `option(...)` gives them. A command that changes a section's defaults (`rltap train`'s
`--group-size 8`, `rltap demo`'s `--default-max-tokens 128`) says so on its own page.
`tests/config/test_reference.py` fails when the committed page differs from this output.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

from rltap.config.demo import DemoConfig
from rltap.config.evaluate import EvalConfig
from rltap.config.flags import AppendAction, Setting, settings
from rltap.config.rollout import RolloutConfig
from rltap.config.serve import ServerConfig
from rltap.config.train import TrainConfig

__all__ = ["COMMANDS", "REGENERATE", "Command", "reference"]

REGENERATE = "python -m rltap.config.reference > docs/configuration.md"


@dataclass(frozen=True, slots=True)
class Command:
    """A `rltap` subcommand whose flags are one configuration dataclass."""

    name: str
    config: type[Any]
    config_file: bool  # whether it takes `--config FILE` (`add_arguments(config_file=True)`)


COMMANDS: tuple[Command, ...] = (
    Command("serve", ServerConfig, config_file=True),
    Command("rollout", RolloutConfig, config_file=True),
    Command("eval", EvalConfig, config_file=True),
    Command("train", TrainConfig, config_file=True),
    Command("demo", DemoConfig, config_file=False),
)

_INTRO = f"""\
<!-- Written by `{REGENERATE}` from rltap.config; edit the dataclasses, not this page. -->

# Configuration

Every setting of `rltap serve`, `rollout`, `eval`, `train` and `demo` is a field of a dataclass in
`rltap.config`, its default and its help written once; the command line's flags derive from the
fields (`rltap.config.flags`), and so does this page. Python code builds the same dataclasses
(`ServeConfig(engine=EngineConfig(engine="vllm", url=...))`).

A command that *reads `--config FILE`* also takes its settings from a YAML or TOML file whose
keys are the flags' names without the dashes (`rows-per-step` or `rows_per_step`): a flag on the
command line wins over the file, the file over the default, and an unknown key is an error that
names it. A switch is `true` or `false` in a file; `ray: true` starts a local cluster. `rltap
demo` comes with this repository's tools (`dev/`, the `rltap-dev` distribution), not with the
`rltap` wheel.

The commands that read capture stores (`rltap export`, `inspect`, `view`) and build test assets
(`rltap models`) have a few flags of their own: [recording.md](recording.md) and
[engines.md](engines.md), and each command's `--help`.
"""

_TYPE_WORDS: dict[Any, str] = {int: "integer", float: "number", Path: "path"}


def reference() -> str:
    """The Markdown of `docs/configuration.md`."""
    parts = [_INTRO, "## Commands\n"]
    parts += [_command(command) for command in COMMANDS]
    parts.append("## Sections\n\nEach section once, with the defaults it declares.\n")
    listed: set[type[Any]] = set()
    for command in COMMANDS:
        for cls, _ in _sections(command.config):
            parts += _section_tree(cls, listed)
    return "\n".join(parts)


def _command(command: Command) -> str:
    cls = command.config
    lines = _heading(f"### `rltap {command.name}`", cls)
    if command.config_file:
        lines += ["Reads `--config FILE`.", ""]
    lines += _table(_own(cls))
    embedded = list(_sections(cls))
    if embedded:
        named = ", ".join(_link(section_cls, title) for section_cls, title in embedded)
        lines += ["", f"Its sections: {named}."]
    changed = [
        f"`{s.flag}` {_default(s)}" for s in settings(cls) if s.default != _declared_default(cls, s)
    ]
    if changed:
        lines += ["", "Defaults that differ here from the sections': " + ", ".join(changed) + "."]
    return "\n".join(lines) + "\n"


def _section_tree(cls: type[Any], listed: set[type[Any]]) -> list[str]:
    """The section `cls`, then the sections it embeds, each one only once in the page."""
    if cls in listed:
        return []
    listed.add(cls)
    nested = [section_cls for section_cls, _ in _sections(cls)]
    lines = _heading(f"### {cls.__name__}", cls)
    own = _own(cls)
    if own:
        lines += [*_table(own), ""]
    if nested:
        joined = ", ".join(_link(section_cls, None) for section_cls in nested)
        lines.append(f"{'And the' if own else 'The'} sections {joined}.")
    parts = ["\n".join(lines).rstrip("\n") + "\n"]
    for section_cls in nested:
        parts += _section_tree(section_cls, listed)
    return parts


def _heading(title: str, cls: type[Any]) -> list[str]:
    doc = _doc(cls)
    return [title, "", doc, ""] if doc else [title, ""]


def _own(cls: type[Any]) -> list[Setting]:
    """The settings `cls` declares itself (inherited fields too), not its sections'."""
    return [s for s in settings(cls) if len(s.path) == 1]


def _sections(cls: type[Any]) -> Iterator[tuple[type[Any], str | None]]:
    """The section classes `cls` embeds directly, with their `--help` group titles."""
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.init and f.metadata.get("section"):
            yield hints[f.name], f.metadata.get("title")


def _declared_default(cls: type[Any], setting: Setting) -> Any:
    """The setting's default as the class that declares its field gives it."""
    *sections, name = setting.path
    for section_name in sections:
        cls = get_type_hints(cls)[section_name]
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _link(cls: type[Any], title: str | None) -> str:
    shown = f"[`{cls.__name__}`](#{cls.__name__.lower()})"
    return f"{shown} (`--help` group *{title}*)" if title else shown


def _doc(cls: type[Any]) -> str:
    """The class's docstring, each paragraph on one line, an indented (example) line as code."""
    doc = inspect.getdoc(cls) or ""
    if doc.startswith(f"{cls.__name__}("):  # the docstring dataclasses makes up
        return ""
    paragraphs = []
    for paragraph in doc.split("\n\n"):
        lines = paragraph.splitlines()
        shown = [f"`{ln.strip()}`" if ln[:1].isspace() else " ".join(ln.split()) for ln in lines]
        paragraphs.append(" ".join(shown))
    return "\n\n".join(paragraphs)


def _table(rows: list[Setting]) -> list[str]:
    lines = ["| flag | value | default | meaning |", "|---|---|---|---|"]
    for s in rows:
        cells = [_flag(s), _value(s), _default(s), _help(s)]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return lines


def _flag(s: Setting) -> str:
    if not s.flag.startswith("-"):
        return f"`{s.shown}`"
    if s.kwargs.get("action") is argparse.BooleanOptionalAction:
        return f"`{s.flag}`, `--no-{s.flag[2:]}`"
    return f"`{s.flag}`"


def _value(s: Setting) -> str:
    kwargs = s.kwargs
    if "choices" in kwargs:
        return ", ".join(f"`{choice}`" for choice in kwargs["choices"])
    action = kwargs.get("action")
    if action == "store_true" or action is argparse.BooleanOptionalAction:
        return "switch"
    word = kwargs.get("metavar") or _TYPE_WORDS.get(kwargs.get("type"), "text")
    if action is AppendAction:
        return f"{word}, repeatable"
    if kwargs.get("nargs") == "+":
        return f"{word} ..."
    if kwargs.get("nargs") == "?":
        return f"[{word}]"
    return str(word)


def _default(s: Setting) -> str:
    if s.required:
        return "required"
    value = s.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, list | tuple):
        return ", ".join(f"`{item}`" for item in value)
    return f"`{value}`"


def _help(s: Setting) -> str:
    text = str(s.kwargs.get("help") or "")
    shown = s.default.value if isinstance(s.default, enum.Enum) else s.default
    return " ".join(text.replace("%(default)s", str(shown)).replace("%%", "%").split())


def main() -> None:
    """Write the reference to stdout."""
    sys.stdout.write(reference())


if __name__ == "__main__":
    main()
