"""Settings are owned by `rltap.config`, not mirrored: the runtime classes take its sections
themselves, and none redeclares one of its defaults, so adding a setting is one field there."""

from __future__ import annotations

import ast
import dataclasses
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import rltap
import rltap.config
import rltap.config.serve
from rltap.chat.renderer import ChatRenderer
from rltap.client.direct import DirectOpenAI
from rltap.config import (
    ChatConfig,
    LimitsConfig,
    LoopConfig,
    ServeConfig,
    StoreConfig,
    UpdateConfig,
)
from rltap.engines.scripted import ScriptedEngine
from rltap.proxy import create_app
from rltap.testing.proxy import TEST_ADMIN_KEY
from rltap.testing.scripts import echo
from rltap.train.trainer import PolicyTrainer

SOURCE = Path(rltap.__file__).parent
# Where a default is not a copy of a setting: the settings themselves; AReaL's surface, whose
# defaults are AReaL's (`ArealOpenAI`, `OpenAIProxyWorkflow`, its wire types); the wire APIs
# and the records, whose defaults are the APIs'.
NOT_RUNTIME = {"config", "areal", "protocols", "record"}
# Defaults that equal a setting's by purpose, not by copy; each says why.
_BUILT_IN_CODE = "an engine built in code: on the CPU, one thread (`create_engine` takes flags)"
NOT_COPIES = {
    ("engines/_hf.py", "ModelHost", "device"): _BUILT_IN_CODE,
    ("engines/_hf.py", "ModelHost", "num_threads"): _BUILT_IN_CODE,
    ("engines/scripted.py", "ScriptedEngine", "device"): _BUILT_IN_CODE,
    ("engines/scripted.py", "ScriptedEngine", "num_threads"): _BUILT_IN_CODE,
    ("engines/transformers.py", "TransformersEngine", "device"): _BUILT_IN_CODE,
    ("engines/transformers.py", "TransformersEngine", "num_threads"): _BUILT_IN_CODE,
    ("engines/transformers.py", "TransformersEngine", "max_prefill_tokens"): "one constant",
    ("proxy/server.py", "ProxyServer", "host"): "an in-process server (tests, rollouts): loopback",
    ("proxy/control.py", "ExportRequest", "style"): "the HTTP body's default (a wire model)",
    ("rollout/workflow.py", "WorkflowSettings", "style"): "the export body's own default",
}


def _leaf_defaults(cls: type[Any], instance: Any = None) -> Iterator[tuple[str, Any]]:
    """Each setting of `cls` and its default; a section's from the enclosing default instance
    (a command may change a shared section's defaults: `rltap demo`'s max tokens)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if instance is not None:
            value = getattr(instance, f.name)
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue  # required: no default to copy
        if f.metadata.get("section"):
            yield from _leaf_defaults(hints[f.name], value)
        else:
            yield f.name, value


def setting_defaults() -> dict[str, set[str]]:
    """Every setting of `rltap.config` by name, with its defaults (as repr)."""
    found: dict[str, set[str]] = {}
    for name in rltap.config.__all__:
        cls = getattr(rltap.config, name)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            for setting, value in _leaf_defaults(cls):
                found.setdefault(setting, set()).add(repr(value))
    return found


CONSTANTS = {
    name: repr(getattr(rltap.config.serve, name))
    for name in dir(rltap.config.serve)
    if name.isupper()
}


def _copied(default: ast.expr) -> str | None:
    """What `default` holds as a setting would (its repr), or "reference" for a config field
    read as a default (`ChatConfig.default_max_tokens`); None when it is neither."""
    if (
        isinstance(default, ast.Attribute)
        and isinstance(default.value, ast.Name)
        and default.value.id.endswith("Config")
    ):
        return "reference"
    if isinstance(default, ast.Name) and default.id in CONSTANTS:
        return CONSTANTS[default.id]
    try:
        return repr(ast.literal_eval(default))
    except ValueError:
        return None


def _class_defaults(cls: ast.ClassDef) -> Iterator[tuple[str, ast.expr]]:
    """A class's fields with a default and its `__init__`'s parameters with one."""
    for statement in cls.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            if statement.value is not None:
                yield statement.target.id, statement.value
        elif isinstance(statement, ast.FunctionDef) and statement.name == "__init__":
            args = statement.args
            positional = [*args.posonlyargs, *args.args]
            with_default = positional[len(positional) - len(args.defaults) :]
            yield from ((a.arg, d) for a, d in zip(with_default, args.defaults, strict=True))
            yield from (
                (a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d
            )


def redeclared_defaults(source: Path = SOURCE) -> dict[tuple[str, str, str], str]:
    """(module, class, name) -> the default, for every runtime class field or constructor
    parameter under `source` named like a setting whose default is that setting's (None,
    "not given", aside) or is read from a config class."""
    settings = setting_defaults()
    found = {}
    for path in sorted(source.rglob("*.py")):
        module = path.relative_to(source)
        if module.parts[0] in NOT_RUNTIME:
            continue
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef):
                continue
            for name, default in _class_defaults(cls):
                value = _copied(default)
                if value == "reference" or (
                    name in settings and value not in (None, "None") and value in settings[name]
                ):
                    found[(module.as_posix(), cls.name, name)] = value or ""
    return found


def test_no_runtime_class_redeclares_a_default_of_the_config() -> None:
    copies = {key: value for key, value in redeclared_defaults().items() if key not in NOT_COPIES}
    assert copies == {}, "take the rltap.config section instead of copying its defaults"


def test_the_scan_finds_a_mirrored_default(tmp_path: Path) -> None:
    """The scan would have caught the mirrors this replaced (`SessionConfig`'s
    `default_max_tokens: int = ChatConfig.default_max_tokens`, `ProxyLimits`' `capacity: int
    = 1024`), in a dataclass's fields or a constructor's parameters."""
    (tmp_path / "proxy").mkdir()
    (tmp_path / "proxy" / "old.py").write_text(
        "class SessionConfig:\n"
        "    default_max_tokens: int = ChatConfig.default_max_tokens\n"
        "class ProxyLimits:\n"
        "    capacity: int = 1024\n"
        "    reap_interval: float = 1.0\n"  # not the setting's default: not a copy
        "    model_name: str | None = None\n"  # "not given": not a copy
        "class DirectOpenAI:\n"
        "    def __init__(self, engine, *, tool_parser='hermes', max_context=None): ...\n"
    )
    assert set(redeclared_defaults(tmp_path)) == {
        ("proxy/old.py", "SessionConfig", "default_max_tokens"),
        ("proxy/old.py", "ProxyLimits", "capacity"),
        ("proxy/old.py", "DirectOpenAI", "tool_parser"),
    }


async def test_the_runtime_classes_hold_the_sections_they_are_given(
    tiny_model: Any, tiny_model_dir: Path, renderer: ChatRenderer, tmp_path: Path
) -> None:
    """The proxy, its sessions, the direct client and the trainer keep the very sections they
    are given: a field added to one reaches them with no code between."""
    engine = ScriptedEngine(echo, tiny_model, tokenizer=renderer.tokenizer)
    config = ServeConfig(
        chat=ChatConfig(max_context=1024, reasoning_parser="qwen3"),
        limits=LimitsConfig(capacity=3, grant_ttl=9.0, model_name="tiny"),
        store=StoreConfig(store=str(tmp_path / "capture.sqlite"), store_retention="5"),
    )
    app = create_app(engine, renderer, config, admin_key=TEST_ADMIN_KEY)
    state = app.state.rltap
    assert state.config is config
    assert state.store.limits is config.limits
    session_id, _ = state.store.start()
    assert state.store.get(session_id).session.chat is config.chat
    assert state.store.capture.path == tmp_path / "capture.sqlite"
    state.store.capture.close()

    client = DirectOpenAI(engine=engine, tokenizer=renderer.tokenizer, chat=config.chat)
    assert client.session.chat is config.chat
    await client.close()

    update, loop = UpdateConfig(lr=1e-3), LoopConfig(max_staleness=2)
    trainer = PolicyTrainer(tiny_model, update, loop)
    assert (trainer.update, trainer.max_staleness) == (update, 2)
    assert trainer.optimizer.defaults["lr"] == 1e-3
