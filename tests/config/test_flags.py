"""The settings are the dataclasses of `rltap.config`: every flag of `rltap serve`, `rollout`,
`train` and `demo` is a field with the field's default, a `--config` file round-trips a
config, flags win over the file, a config pickles (what Ray sends each actor), and each
setting is checked where it is declared."""

from __future__ import annotations

import dataclasses
import pickle
import re
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from rltap.cli.commands import build_parser
from rltap.config import (
    ChatConfig,
    ConfigError,
    DemoConfig,
    EngineConfig,
    EpisodeConfig,
    EvalConfig,
    LimitsConfig,
    LoopConfig,
    PassConfig,
    RayConfig,
    RolloutConfig,
    ServeConfig,
    ServerConfig,
    StoreConfig,
    TrainConfig,
    TrainEvalConfig,
    UpdateConfig,
    from_namespace,
    parse,
)
from rltap.config.flags import config_values, read_config_file, settings
from rltap.config.serve import ChatTemplateMode

# Each command's dataclass, and the fewest words its parser takes.
COMMANDS = [
    pytest.param("serve", ServerConfig, {}, id="serve"),
    pytest.param(
        "rollout", RolloutConfig, {"agent": "a.py:A", "data": "d", "out": "o"}, id="rollout"
    ),
    pytest.param("eval", EvalConfig, {"agent": "a.py:A", "data": "d", "out": "o"}, id="eval"),
    pytest.param("train", TrainConfig, {}, id="train"),
    pytest.param("demo", DemoConfig, {}, id="demo"),
]
# What the command line keeps besides the settings: its dispatch, and the reparse with --config.
NOT_SETTINGS = {"command", "handler", "command_parser", "config"}


def _argv(command: str, required: dict[str, str]) -> list[str]:
    words = [command]
    for name, value in required.items():
        words += [value] if name == "agent" else [f"--{name}", value]
    return words


@pytest.mark.parametrize(("command", "cls", "required"), COMMANDS)
def test_every_flag_is_a_field_with_its_default(
    command: str, cls: type[Any], required: dict[str, str]
) -> None:
    parsed = vars(build_parser().parse_args(_argv(command, required)))
    fields = {s.dest: s for s in settings(cls)}
    assert set(parsed) - NOT_SETTINGS == set(fields)  # a flag added by hand has no field
    for dest, value in parsed.items():
        if dest in fields and dest not in required:
            assert value == fields[dest].default, dest
    if command != "train":  # train's required settings may come from its --config file
        config = from_namespace(cls, build_parser().parse_args(_argv(command, required)))
        assert config == cls(**required)  # the parsed defaults are the dataclass's


@pytest.mark.parametrize(("command", "cls", "required"), COMMANDS)
def test_help_lists_exactly_the_fields_flags(
    command: str, cls: type[Any], required: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    listed = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", capsys.readouterr().out))
    flags = {s.flag for s in settings(cls) if s.flag.startswith("--")}
    extra = {"--help"} if command == "demo" else {"--help", "--config"}
    assert listed == flags | extra


def _changed() -> TrainConfig:
    """A train config with a setting off its default in every section."""
    return TrainConfig(
        agent="pkg.agent:Agent",
        data="rows.jsonl",
        out="run",
        loop=LoopConfig(
            steps=3,
            episodes=EpisodeConfig(group_size=2, mode="subproc", episode_timeout=9.5, seed=7),
            async_rollouts=True,
        ),
        update=UpdateConfig(algo="ppo", lr=3e-3, minibatches=2),
        evaluation=TrainEvalConfig(
            eval_data="held_out.jsonl", eval_every=2, passing=PassConfig(pass_threshold=0.5)
        ),
        serve=ServeConfig(
            engine=EngineConfig(engine="scripted", model="m", script="s:f"),
            chat=ChatConfig(chat_template_mode="hf", strict_max_tokens=True, max_context=512),
            limits=LimitsConfig(capacity=7, export_format="areal"),
        ),
        ray=RayConfig(ray="head:6379", replicas=2),
    )


def _train(argv: list[str]) -> TrainConfig:
    parser = build_parser().parse_args(["train"]).command_parser
    return parse(TrainConfig, parser, argv, required=TrainConfig.REQUIRED_TOO)


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_a_config_file_round_trips(tmp_path: Path, suffix: str) -> None:
    config = _changed()
    values = {k: v for k, v in config_values(config).items() if v is not None}
    path = tmp_path / f"run{suffix}"
    if suffix == ".yaml":
        path.write_text(yaml.safe_dump(values))
    else:
        path.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in values.items()))
    assert _train(["--config", str(path)]) == config


@pytest.mark.parametrize(
    ("command", "cls", "required"), [p for p in COMMANDS if p.id in ("serve", "rollout", "eval")]
)
def test_serve_rollout_and_eval_read_a_config_file_under_their_flags(
    tmp_path: Path, command: str, cls: type[Any], required: dict[str, str]
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**required, "engine": "scripted", "max-context": 512}))
    parser = build_parser().parse_args(_argv(command, required)).command_parser
    config = parse(cls, parser, ["--config", str(path), "--max-context", "640"])
    expected = config_values(cls(**required)) | {"engine": "scripted", "max-context": 640}
    assert config_values(config) == expected


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, int | float) else f'"{value}"'


def test_the_command_line_wins_over_the_file_which_wins_over_the_default(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("agent: a:A\ndata: d\nmodel: m\nout: o\nlr: 0.5\nsteps: 4\nasync: true\n")
    config = _train(["--config", str(path), "--steps", "6"])
    assert (config.loop.steps, config.update.lr, config.loop.async_rollouts) == (6, 0.5, True)
    assert config.update.clip == UpdateConfig().clip
    assert config.loop.episodes.group_size == 8  # train's own default, not rollout's 1


def test_a_refused_value_is_a_usage_error_naming_its_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        _train(["a:A", "--data", "d", "--model", "m", "--out", "o", "--rows-per-step", "0"])
    assert exited.value.code == 2
    assert "--rows-per-step must be at least 1" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--group-size and --concurrency"):
        EpisodeConfig(concurrency=0)


def test_configs_pickle_for_the_ray_actors() -> None:
    train = _changed()
    rollout = dataclasses.replace(
        train.rollout(), agents=["planner"], link_factors=[("handoff", 0.5)]
    )
    for config in (train, rollout, ServerConfig(), DemoConfig()):
        assert pickle.loads(pickle.dumps(config)) == config
    assert (rollout.style, rollout.episodes, rollout.serve) == (
        "tree",
        train.loop.episodes,
        train.serve,
    )


def test_the_template_modes_are_the_renderers_and_the_demos_replies_are_short() -> None:
    from rltap.chat.renderer import RenderMode

    assert set(get_args(ChatTemplateMode)) == {mode.value for mode in RenderMode}
    assert DemoConfig().serve.chat.default_max_tokens == 128


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(lambda: ChatConfig(default_max_tokens=0), "--default-max-tokens", id="chat"),
        pytest.param(
            lambda: ChatConfig(chat_template_mode="jinja"),
            "--chat-template-mode",
            id="template-mode",
        ),
        pytest.param(lambda: LimitsConfig(capacity=0), "--capacity", id="capacity"),
        pytest.param(lambda: LimitsConfig(reap_interval=0), "--reap-interval", id="reap"),
        pytest.param(
            lambda: LimitsConfig(export_wait_timeout=700), "--max-export-wait", id="export-wait"
        ),
        pytest.param(lambda: StoreConfig(store_retention="7d"), "needs --store", id="retention"),
        pytest.param(lambda: EngineConfig().tokenizer_dir, "--tokenizer", id="tokenizer"),
        pytest.param(
            lambda: ServerConfig(host="0.0.0.0", admin_key="admin"),
            "refusing to listen on 0.0.0.0",
            id="admin-key",
        ),
        pytest.param(lambda: UpdateConfig(minibatches=0), "--minibatches", id="minibatches"),
        pytest.param(lambda: UpdateConfig(temperature=0), "--temperature", id="temperature"),
        pytest.param(lambda: LoopConfig(max_staleness=-1), "--max-staleness", id="staleness"),
    ],
)
def test_a_setting_is_checked_where_it_is_declared(build: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build()


def test_a_config_error_is_an_rltap_error_and_a_bad_file_is_one(tmp_path: Path) -> None:
    from rltap.record.errors import RltapError

    assert issubclass(ConfigError, RltapError)
    assert issubclass(ConfigError, ValueError)  # what argparse and older callers catch
    every = settings(TrainConfig)
    for name, text in [("run.ini", "x = 1"), ("run.toml", "x = "), ("run.yaml", "- a list")]:
        (tmp_path / name).write_text(text)
        with pytest.raises(ConfigError, match=re.escape(name)):
            read_config_file(tmp_path / name, every)
    with pytest.raises(ConfigError, match=re.escape("missing.yaml")):
        read_config_file(tmp_path / "missing.yaml", every)


def test_update_derives_the_minibatches_and_the_normalisation_from_the_algorithm() -> None:
    assert (UpdateConfig().updates_per_step, UpdateConfig().normalisation) == (1, "group")
    ppo = UpdateConfig(algo="ppo")
    assert (ppo.updates_per_step, ppo.normalisation) == (4, "batch")
    assert UpdateConfig(algo="ppo", minibatches=2).updates_per_step == 2
