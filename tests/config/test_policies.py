"""`rltap train`'s policies (`rltap.config.policies`): the `[policies]` table of a config file and
the `--policy` flags give the same settings; every refusal names its flag or key before a
rollout; the run's first lines and the warning about an agent no call carried."""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import pytest
import yaml

from rltap.cli.commands import build_parser
from rltap.config import (
    ConfigError,
    EngineConfig,
    LoraConfig,
    PolicyConfig,
    ServeConfig,
    TrainConfig,
    UpdateConfig,
    parse,
)
from rltap.config.engines import ENGINES
from rltap.config.flags import config_values, read_config_file, settings
from rltap.config.policies import policy_lines, policy_of, unseen_agents_warning
from rltap.config.serve import ServerConfig

REQUIRED = ["agent.py:Agent", "--data", "rows.jsonl", "--model", "m", "--out", "run"]
TABLE = """\
[policies.tutor]
agents = ["Math Tutor"]
lora_rank = 8

[policies.student]
agents = ["Student", "Student/summary"]
lora_rank = 4
lr = 2e-5
kl-coef = 0.01
"""
FLAGS = [
    "--policy",
    "tutor=Math Tutor:8",
    "--policy",
    "student=Student,Student/summary:4:lr=2e-5:kl_coef=0.01",
]
POLICIES = {
    "tutor": PolicyConfig(agents=("Math Tutor",), lora_rank=8),
    "student": PolicyConfig(
        agents=("Student", "Student/summary"), lora_rank=4, lr=2e-5, kl_coef=0.01
    ),
}


def _train(argv: list[str]) -> TrainConfig:
    parser = build_parser().parse_args(["train"]).command_parser
    return parse(TrainConfig, parser, argv, required=TrainConfig.REQUIRED_TOO)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        _train(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


def _file(tmp_path: Path, text: str, name: str = "run.toml") -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    return ["--config", str(path)]


def test_the_file_s_table_and_the_flags_give_the_same_policies(tmp_path: Path) -> None:
    from_file = _train([*REQUIRED, *_file(tmp_path, TABLE)])
    from_flags = _train([*REQUIRED, *FLAGS])
    assert from_file == from_flags
    assert from_file.policies == POLICIES
    as_yaml = yaml.safe_dump({"policies": config_values(from_file)["policy"]})
    assert _train([*REQUIRED, *_file(tmp_path, as_yaml, "run.yaml")]) == from_file
    assert _train(REQUIRED).policies is None  # no policies: one policy serves every call
    assert pickle.loads(pickle.dumps(from_file)) == from_file  # what Ray sends each actor


def test_the_command_line_s_policies_replace_the_file_s_table(tmp_path: Path) -> None:
    config = _train([*REQUIRED, *_file(tmp_path, TABLE), "--policy", "solo=Math Tutor:16"])
    assert config.policies == {"solo": PolicyConfig(agents=("Math Tutor",), lora_rank=16)}


def test_a_policy_takes_the_run_s_rate_and_kl_unless_it_has_its_own() -> None:
    run = UpdateConfig(lr=1e-4, kl_coef=0.5)
    assert POLICIES["tutor"].update(run) == run
    own = POLICIES["student"].update(run)
    assert (own.lr, own.kl_coef, own.clip) == (2e-5, 0.01, run.clip)
    lora = POLICIES["student"].lora(LoraConfig(lora_target_modules="q_proj,v_proj"))
    assert (lora.lora_rank, lora.alpha, lora.targets) == (4, 8, ["q_proj", "v_proj"])


@pytest.mark.parametrize(
    ("words", "table", "message"),
    [
        pytest.param(
            ["--policy", "a=Math Tutor:8", "--policy", "b=Student,Math Tutor:8"],
            None,
            "policies 'a' and 'b' both claim agent 'Math Tutor'",
            id="one-agent-two-policies",
        ),
        pytest.param(
            [],
            '[policies.a]\nagents = ["X"]\nlora_rank = 8\n[policies.b]\nagents = ["X"]\n'
            "lora_rank = 8\n",
            "policies 'a' and 'b' both claim agent 'X'",
            id="one-agent-two-policies-file",
        ),
        pytest.param(
            [],
            "[policies.a]\nagents = []\nlora_rank = 8\n",
            "[policies.a] names no agent",
            id="no-agents-file",
        ),
        pytest.param(
            [], "[policies.a]\nlora_rank = 8\n", "[policies.a] names no agent", id="no-agents-key"
        ),
        pytest.param(["--policy", "a=:8"], None, "--policy a names no agent", id="no-agents-flag"),
        pytest.param([], "[policies]\n", "[policies] names no policy", id="empty-table"),
        pytest.param(
            ["--policy", "a.b=X:8"], None, "policy name 'a.b': a policy's name is", id="dotted"
        ),
        pytest.param(["--policy", "default=X:8"], None, "not 'default'", id="default"),
        pytest.param(
            [],
            '[policies.a]\nagents = ["X", " Y"]\nlora_rank = 8\n',
            "[policies.a] agents holds ' Y': a call's agent id has no surrounding spaces",
            id="spaces",
        ),
        pytest.param(
            [], '[policies.a]\nagents = ["X"]\n', "[policies.a] needs lora_rank", id="no-rank-file"
        ),
        pytest.param(
            [],
            '[policies.a]\nagents = ["X"]\nlora_rank = 0\n',
            "[policies.a] lora_rank must be at least 1, got 0: with policies every policy "
            "trains a LoRA adapter",
            id="rank-0-file",
        ),
        pytest.param(
            ["--policy", "a=X:0"], None, "--policy a lora_rank must be at least 1", id="rank-0-flag"
        ),
        pytest.param(
            ["--policy", "a=X"], None, "argument --policy: expected NAME=AGENT", id="no-rank-flag"
        ),
        pytest.param(
            ["--policy", "a=X:eight"],
            None,
            "a: RANK after the agents is a whole number",
            id="rank-not-a-number",
        ),
        pytest.param(
            ["--policy", "a=X:8:beta=1"],
            None,
            "a: after the rank come lr=LR and kl_coef=K",
            id="unknown-flag-key",
        ),
        pytest.param(
            [],
            '[policies.a]\nagents = ["X"]\nlora_rank = 8\nrank = 8\n',
            "[policies.a]: unknown keys ['rank'] (a policy takes agents, lora_rank, lr, kl_coef)",
            id="unknown-file-key",
        ),
        pytest.param(
            ["--policy", "a=X:8:lr=0"],
            None,
            "--policy a lr must be positive, got 0.0",
            id="lr-0",
        ),
        pytest.param(
            ["--policy", "a=X:8", "--policy", "a=Y:8"],
            None,
            "--policy a is given twice",
            id="one-name-twice",
        ),
        pytest.param(
            ["--policy", "a=X:8", "--agents", "X"],
            None,
            "--agents with policies ([policies] or --policy): the policies say whose calls train",
            id="agents",
        ),
        pytest.param(
            ["--policy", "a=X:8", "--engine", "sglang", "--url", "http://h:1"],
            None,
            "--engine sglang serves no LoRA adapters by name, which policies need (one adapter "
            "per policy over --model): use one of transformers, vllm, scripted",
            id="sglang",
        ),
        pytest.param(
            ["--policy", "a=X:8", "--lora-rank", "4"],
            None,
            "--lora-rank 4 with policy 'a' of lora_rank 8: with policies each policy's rank is "
            "its own; drop --lora-rank",
            id="lora-rank",
        ),
        pytest.param(
            ["--policy", "a=X:8", "--nproc-per-node", "2"],
            None,
            "policies ([policies] or --policy) train in one process for now: drop --ray and "
            "--nproc-per-node",
            id="ranks",
        ),
        pytest.param(
            ["--policy", "a=X:8", "--ray", "auto"],
            None,
            "policies ([policies] or --policy) train in one process for now",
            id="ray",
        ),
    ],
)
def test_each_refusal_names_its_flag_or_key_before_any_rollout(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    words: list[str],
    table: str | None,
    message: str,
) -> None:
    config_file = _file(tmp_path, table) if table is not None else []
    assert message in _refused([*REQUIRED, *config_file, *words], capsys)


def test_the_same_checks_hold_for_a_config_built_in_code() -> None:
    def build(**changes: object) -> TrainConfig:
        serve = ServeConfig(engine=EngineConfig(model="m"))
        return TrainConfig(agent="a:A", data="d", out="o", serve=serve, **changes)  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match="names no agent"):
        PolicyConfig(agents=(), lora_rank=8)
    x2 = PolicyConfig(agents=("X",), lora_rank=2)
    with pytest.raises(ConfigError, match="both claim agent 'X'"):
        build(policies={"a": PolicyConfig(agents=("X",), lora_rank=8), **POLICIES, "b": x2})
    with pytest.raises(ConfigError, match="not a PolicyConfig"):
        build(policies={"a": {"agents": ["X"], "lora_rank": 8}})


def test_a_lora_rank_equal_to_every_policy_s_is_accepted() -> None:
    config = _train([*REQUIRED, "--policy", "a=X:8", "--policy", "b=Y:8", "--lora-rank", "8"])
    assert config.policies is not None
    assert set(config.policies) == {"a", "b"}


def test_the_engines_that_serve_adapters_by_name() -> None:
    assert {name for name, entry in ENGINES.items() if not entry.adapters} == {"sglang"}
    for name in ("vllm", "sglang"):  # the server engines say it on their classes too
        entry = ENGINES[name]
        engine_class = getattr(importlib.import_module(entry.module), entry.class_name)
        assert engine_class.serves_adapters is entry.adapters


def test_the_policy_of_an_agent_and_the_run_s_first_lines() -> None:
    assert policy_of(POLICIES, "Student/summary") == "student"
    assert policy_of(POLICIES, "Student/other") is None  # the frozen base model
    assert policy_of(POLICIES, None) is None
    assert policy_lines(POLICIES, lr=1e-5, kl_coef=UpdateConfig().kl_coef) == [
        "2 policies, a LoRA adapter each over --model:",
        "  tutor: agents 'Math Tutor' (LoRA rank 8, lr 1e-05, kl_coef 0)",
        "  student: agents 'Student', 'Student/summary' (LoRA rank 4, lr 2e-05, kl_coef 0.01)",
        "agents no policy names run on the frozen base model: their calls are not trained",
    ]


def test_the_warning_about_an_agent_no_call_carried_lists_the_ids_seen() -> None:
    seen = ["Student", "agent-0123456789ab", "Student", None]
    assert unseen_agents_warning(POLICIES, seen) == (
        "policies name agents no call of the first step carried: 'tutor' names 'Math Tutor' "
        "(so it trains on no call); 'student' names 'Student/summary'. The calls carried these "
        "agent ids (X-Rltap-Agent; an unnamed agent's id comes from its system prompt and "
        "tools, agent-<12 hex digits>): 'Student', 'agent-0123456789ab'"
    )
    assert unseen_agents_warning(POLICIES, ["Math Tutor", "Student", "Student/summary"]) is None
    assert (unseen_agents_warning(POLICIES, []) or "").endswith("agent-<12 hex digits>): none")


def test_the_run_s_serving_settings_carry_its_policies(tmp_path: Path) -> None:
    config = _train([*REQUIRED, *FLAGS])
    # The proxy of every rollout (in process, or a Ray actor's) routes each call by them.
    assert config.serve.policies == POLICIES
    assert config.rollout().serve.policies == POLICIES
    assert pickle.loads(pickle.dumps(config.rollout())).serve.policies == POLICIES
    assert _train(REQUIRED).rollout().serve.policies is None
    # Code sets them, not a flag or a config file key: `rltap serve` takes no such flag.
    assert "policies" not in config_values(config.serve)
    assert "policies" not in {setting.dest for setting in settings(ServerConfig)}
    with pytest.raises(ConfigError, match="unknown keys"):
        read_config_file(Path(_file(tmp_path, "policies = 1\n")[1]), settings(ServerConfig))
