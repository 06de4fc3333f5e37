"""What each rollout actor is told: one per embedded replica or per server of `--url`, each
with its own capture store; the flags' errors; `ray:` in a train config file. (Placement on a
server's node needs the cluster: tests/rollout/ray/test_ray.py.)"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from rltap.cli.commands import build_parser
from rltap.config import ConfigError, RolloutConfig, TrainConfig, from_namespace, parse
from rltap.rollout.ray.cluster import actor_configs


def _rollout(*options: str) -> RolloutConfig:
    argv = ["rollout", "agent.py:Agent", "--data", "d", "--out", "o", "--ray", *options]
    return from_namespace(RolloutConfig, build_parser().parse_args(argv))


def test_one_actor_per_server_each_with_its_url_and_its_own_store() -> None:
    url = "http://a:8000, http://b:8000"
    store = ["--store", "/runs/capture.sqlite"]
    specs = actor_configs(_rollout("--engine", "vllm", "--url", url, *store))
    assert [spec.serve.engine.url for spec in specs] == ["http://a:8000", "http://b:8000"]
    stores = [spec.serve.store.store for spec in specs]
    assert stores == ["/runs/capture-actor0.sqlite", "/runs/capture-actor1.sqlite"]
    assert [pickle.loads(pickle.dumps(spec)) for spec in specs] == specs  # what Ray sends


def test_embedded_replicas_and_the_flags_errors() -> None:
    assert len(actor_configs(_rollout("--replicas", "3"))) == 3
    with pytest.raises(ConfigError, match="--replicas must be at least 1"):
        actor_configs(_rollout("--replicas", "0"))
    with pytest.raises(ConfigError, match="needs --url URL1,URL2"):
        actor_configs(_rollout("--engine", "vllm"))
    mismatch = _rollout("--engine", "sglang", "--url", "http://a:1,http://b:1", "--replicas", "3")
    with pytest.raises(ConfigError, match="--replicas 3 but 2 servers in --url"):
        actor_configs(mismatch)


@pytest.mark.parametrize(
    ("value", "address"),
    [
        pytest.param("true", "", id="true-local"),
        pytest.param("false", None, id="false-off"),
        pytest.param("head:6379", "head:6379", id="address"),
    ],
)
def test_a_train_config_file_names_the_cluster(
    tmp_path: Path, value: str, address: str | None
) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(f"agent: a.py:A\ndata: d\nmodel: m\nout: o\nray: {value}\n")
    args = build_parser().parse_args(["train"])
    parsed = parse(TrainConfig, args.command_parser, ["--config", str(config)])
    assert parsed.ray.ray == address
