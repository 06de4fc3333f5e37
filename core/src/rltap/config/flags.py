"""Command-line flags and `--config` files derived from a configuration dataclass.

A field is one setting: `option(default, help)` gives its default and its help text once; its
flag is `--kebab-name` (or `flag=`), its type comes from the annotation (`int`, `float`, `str`,
`Path`, `X | None`, `list[X]`; `Literal[...]` and `Enum` become choices; a `bool` defaulting
to False is a switch). A field holding another configuration dataclass (`section(...)`) adds
that one's flags, under an argparse group when it has a title; its defaults are the section's
default instance, so a command can change a shared section's defaults
(`section(ChatConfig(default_max_tokens=128))`).

    parser = argparse.ArgumentParser()
    add_arguments(parser, TrainConfig, config_file=True)
    config = parse(TrainConfig, parser, argv)  # a TrainConfig, the file's keys applied

With `config_file=True` the parser takes `--config FILE` (YAML or TOML): its keys are the
flags' names without the dashes, with dashes or underscores, or the fields' names. Precedence:
a flag on the command line, then the file, then the default; an unknown key is an error
naming it. Required settings (a field without a default) may then come from the file, so they
are checked after it is read.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import tomllib
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from rltap.record.errors import RltapError

__all__ = [
    "AppendAction",
    "ConfigError",
    "Setting",
    "add_arguments",
    "config_values",
    "from_namespace",
    "internal",
    "option",
    "parse",
    "read_config_file",
    "section",
    "settings",
]

T = TypeVar("T")

_CONFIG = "config"


class ConfigError(RltapError, ValueError):
    """A setting's value is refused; the message names its flag. Raised where the setting is
    declared (its dataclass's `__post_init__`, a property deriving from it); `parse` turns it
    into a usage error, and `rltap.cli` does for the library's own checks."""


def option(
    default: Any = MISSING,
    help: str | None = None,
    *,
    flag: str | None = None,
    positional: bool = False,
    metavar: str | None = None,
    nargs: str | None = None,
    const: Any = MISSING,
    parse: Callable[[str], Any] | None = None,
    append: bool = False,
    convert: Callable[[Any], Any] | None = None,
) -> Any:
    """A configuration field: its default (none: required) and its help, once.

    `flag` names the flag when it is not `--<field-name>`; `positional` makes it an argument
    without dashes; `nargs`/`const` are argparse's (`--ray [ADDRESS]`: nargs="?", const="");
    `parse` turns one command-line word into a value; `append` collects a repeated flag (the
    command line's replace the file's); `convert` turns what was parsed (the flags' values,
    or the file's value as it is, e.g. a table) into the field's value, raising `ConfigError`."""
    metadata = {
        "help": help,
        "flag": flag,
        "positional": positional,
        "metavar": metavar,
        "nargs": nargs,
        "const": const,
        "parse": parse,
        "append": append,
        "convert": convert,
    }
    return dataclasses.field(default=default, metadata=metadata)


def internal(default: Any, help: str) -> Any:
    """A field that code sets, not a flag or a `--config` key: what a command derives from its
    own settings and hands on (`rltap train`'s policies, in its serving settings)."""
    return dataclasses.field(default=default, metadata={"help": help, "internal": True})


def section(default: Any, title: str | None = None) -> Any:
    """A field holding a nested configuration, `default` (a class or an instance) by default;
    its flags go under the argparse group `title` (none: its parent's)."""
    factory = default if isinstance(default, type) else (lambda: default)
    return dataclasses.field(default_factory=factory, metadata={"section": True, "title": title})


@dataclass(frozen=True, slots=True)
class Setting:
    """One flag derived from a field: where it sits and what argparse needs to parse it."""

    path: tuple[str, ...]  # field names from the top dataclass down to this one
    dest: str  # the argparse destination: the field's name
    flag: str  # "--kebab-name", or the name for a positional
    group: str | None
    default: Any
    required: bool
    kwargs: dict[str, Any]  # for `add_argument`
    convert: Callable[[Any], Any]  # a parsed value into the field's type

    @property
    def shown(self) -> str:
        """How an error message names it: `--flag`, or the positional in capitals."""
        return self.flag if self.flag.startswith("-") else self.flag.upper()


def settings(cls: type[Any]) -> list[Setting]:
    """Every flag of the configuration dataclass `cls`, in field order, sections flattened."""
    return list(_settings(cls, None, (), None))


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _default(f: dataclasses.Field[Any], defaults: Any | None) -> Any:
    """The field's default: in the enclosing section's default instance when there is one."""
    if defaults is not None:
        return getattr(defaults, f.name)
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None if f.default is MISSING else f.default


def _settings(
    cls: type[Any], defaults: Any | None, path: tuple[str, ...], group: str | None
) -> Iterator[Setting]:
    """`defaults`: the section's default instance (None at the top, which may have required
    fields and so no instance)."""
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init or f.metadata.get("internal"):
            continue
        if f.metadata.get("section"):
            title = f.metadata.get("title") or group
            yield from _settings(hints[f.name], _default(f, defaults), (*path, f.name), title)
            continue
        required = _required(f)
        default = _default(f, defaults)
        kwargs, convert = _argparse_kwargs(f, hints[f.name], default)
        meta = f.metadata
        if meta.get("positional"):
            name = f.name
        else:
            name = "--" + (meta.get("flag") or f.name.replace("_", "-"))
            kwargs["dest"] = f.name
        yield Setting((*path, f.name), f.name, name, group, default, required, kwargs, convert)


def _argparse_kwargs(
    f: dataclasses.Field[Any], hint: Any, default: Any
) -> tuple[dict[str, Any], Callable[[Any], Any]]:
    meta = f.metadata
    kind = _strip_optional(hint)
    kwargs: dict[str, Any] = {"default": default, "help": meta.get("help")}
    for key in ("metavar", "nargs"):
        if meta.get(key) is not None:
            kwargs[key] = meta[key]
    if meta.get("const", MISSING) is not MISSING:
        kwargs["const"] = meta["const"]
    convert: Callable[[Any], Any] = meta.get("convert") or _same
    if kind is bool:
        kwargs["action"] = "store_true" if not default else argparse.BooleanOptionalAction
        return kwargs, convert
    if meta.get("append"):
        kwargs["action"] = AppendAction
    if get_origin(kind) is list:
        (kind,) = get_args(kind)
        if not meta.get("append"):
            kwargs.setdefault("nargs", "+")
    if get_origin(kind) is Literal:
        choices = get_args(kind)
        kwargs["choices"] = choices
        kwargs["type"] = type(choices[0])
    elif isinstance(kind, type) and issubclass(kind, enum.Enum):
        kwargs["choices"] = [member.value for member in kind]
        kwargs["type"] = type(kwargs["choices"][0])
        convert = _to_enum(kind)
    elif meta.get("parse") is not None:
        kwargs["type"] = meta["parse"]
    elif kind in (int, float, Path):
        kwargs["type"] = kind
    return kwargs, convert


class AppendAction(argparse.Action):
    """argparse's "append" whose first occurrence on the command line starts a new list: the
    command line's values replace the default's (a `--config` file's), as for every flag."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else list(current)
        setattr(namespace, self.dest, [*items, values])


def _same(value: Any) -> Any:
    return value


def _to_enum(kind: type[enum.Enum]) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        return None if value is None else kind(value)

    return convert


def _strip_optional(hint: Any) -> Any:
    if get_origin(hint) in (Union, types.UnionType):
        kinds = [arg for arg in get_args(hint) if arg is not type(None)]
        if len(kinds) == 1:
            return kinds[0]
    return hint


def add_arguments(
    parser: argparse.ArgumentParser, cls: type[Any], *, config_file: bool = False
) -> None:
    """The flags of `cls` on `parser` (and `--config FILE` with `config_file`: then required
    settings may come from the file, and `parse` checks them)."""
    groups: dict[str, Any] = {}  # argparse's group class is private
    if config_file:
        parser.add_argument(
            "--" + _CONFIG, type=Path, default=None, help="YAML or TOML file with these keys"
        )
    for setting in settings(cls):
        target: Any = parser
        if setting.group is not None:
            if setting.group not in groups:
                groups[setting.group] = parser.add_argument_group(setting.group)
            target = groups[setting.group]
        kwargs = dict(setting.kwargs)
        if setting.required and config_file:
            if not setting.flag.startswith("-"):
                kwargs["nargs"] = "?"
        elif setting.required and setting.flag.startswith("-"):
            kwargs["required"] = True
        target.add_argument(setting.flag, **kwargs)


def from_namespace(cls: type[T], namespace: argparse.Namespace) -> T:
    """The configuration `cls` from parsed flags (`add_arguments(parser, cls)`)."""
    values = vars(namespace)
    config: T = _build(cls, {s.path: s.convert(values[s.dest]) for s in settings(cls)}, ())
    return config


def _build(cls: type[Any], values: dict[tuple[str, ...], Any], path: tuple[str, ...]) -> Any:
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key = (*path, f.name)
        if f.metadata.get("section"):
            kwargs[f.name] = _build(hints[f.name], values, key)
        elif key in values:
            kwargs[f.name] = values[key]
    return cls(**kwargs)


def parse(
    cls: type[T],
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    *,
    required: Sequence[str] = (),
) -> T:
    """`argv` parsed into `cls` (flags from `add_arguments(..., config_file=True)`), the
    `--config` file's keys as the defaults; a missing required setting (with `required`:
    these destinations too), an unknown key or a refused value is a usage error (exit 2)."""
    args = parser.parse_args(argv)
    every = settings(cls)
    path = getattr(args, _CONFIG, None)
    if path is not None:
        try:
            values = read_config_file(path, every)
        except ConfigError as exc:
            parser.error(str(exc))
        parser.set_defaults(**values)
        args = parser.parse_args(argv)
    needed = sorted(
        {s.dest: s for s in every if s.required or s.dest in required}.values(),
        key=lambda s: s.dest,
    )
    missing = [s.shown for s in needed if getattr(args, s.dest) in (None, "")]
    if missing:
        parser.error("missing " + ", ".join(missing))
    try:
        return from_namespace(cls, args)
    except ConfigError as exc:
        parser.error(str(exc))


def config_values(config: Any) -> dict[str, Any]:
    """The `--config` file keys (the flags' names without dashes) and values of `config`, a
    configuration dataclass: `read_config_file` of them gives it back."""
    values: dict[str, Any] = {}
    for s in settings(type(config)):
        value: Any = config
        for name in s.path:
            value = getattr(value, name)
        values[s.flag.lstrip("-")] = _file_value(value)
    return values


def _file_value(value: Any) -> Any:
    """A setting's value as a config file writes it: an enum by its value, a table of
    configurations (`[policies]`) as tables of their fields that are set."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _file_value(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
        return {
            name: list(item) if isinstance(item, tuple) else _file_value(item)
            for name, item in fields
            if item is not None
        }
    return value


def read_config_file(path: Path, every: Sequence[Setting]) -> dict[str, Any]:
    """A config file's values by argparse destination; a key is a flag's name without dashes
    or a field's name, dashes or underscores alike. A flag with a `const` (`--ray [ADDRESS]`)
    takes `true` for that const and `false` for its default."""
    by_key: dict[str, Setting] = {}
    for s in every:
        by_key[s.dest] = s
        by_key[s.flag.lstrip("-").replace("-", "_")] = s
    raw = {str(key).replace("-", "_"): value for key, value in _load(path).items()}
    unknown = sorted(key for key in raw if key not in by_key)
    if unknown:
        msg = f"{path}: unknown keys {unknown}"
        raise ConfigError(msg)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        s = by_key[key]
        const = s.kwargs.get("const", MISSING)
        if isinstance(value, bool) and const is not MISSING and s.kwargs.get("action") is None:
            value = const if value else s.default
        values[s.dest] = value
    return values


def _load(path: Path) -> dict[Any, Any]:
    if path.suffix not in (".yaml", ".yml", ".toml"):
        msg = f"{path}: a config file is .yaml, .yml or .toml"
        raise ConfigError(msg)
    try:
        text = path.read_text()
    except OSError as exc:
        msg = f"{path}: {exc.strerror or exc}"
        raise ConfigError(msg) from None
    if path.suffix == ".toml":
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = f"{path}: {exc}"
            raise ConfigError(msg) from None
    else:
        import yaml

        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            msg = f"{path}: {exc}"
            raise ConfigError(msg) from None
    if not isinstance(raw, dict):
        msg = f"{path}: expected a mapping of keys to values"
        raise ConfigError(msg)
    return raw
