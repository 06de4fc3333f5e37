"""What each rollout actor is told: one per embedded replica or per server of `--url`, each
with its own capture store; the flags' errors; `ray:` in a train config file. (Placement on a
server's node needs the cluster: tests/distributed/test_ray.py.)"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rltap.cli import build_parser
from rltap.distributed.cluster import actor_args


def _rollout_args(*options: str) -> list[str]:
    return ["rollout", "agent.py:Agent", "--data", "d", "--out", "o", "--ray", *options]


def test_one_actor_per_server_each_with_its_url_and_its_own_store() -> None:
    url = "http://a:8000, http://b:8000"
    store = ["--store", "/runs/capture.sqlite"]
    args = build_parser().parse_args(_rollout_args("--engine", "vllm", "--url", url, *store))
    specs = actor_args(args)
    assert [spec.url for spec in specs] == ["http://a:8000", "http://b:8000"]
    stores = [spec.store for spec in specs]
    assert stores == ["/runs/capture-actor0.sqlite", "/runs/capture-actor1.sqlite"]
    assert all(not hasattr(spec, "handler") for spec in specs)  # nothing that does not pickle


def test_embedded_replicas_and_the_flags_errors() -> None:
    parse = build_parser().parse_args
    assert len(actor_args(parse(_rollout_args("--replicas", "3")))) == 3
    with pytest.raises(SystemExit, match="--replicas must be at least 1"):
        actor_args(parse(_rollout_args("--replicas", "0")))
    with pytest.raises(SystemExit, match="needs --url URL1,URL2"):
        actor_args(parse(_rollout_args("--engine", "vllm")))
    mismatch = _rollout_args(
        "--engine", "sglang", "--url", "http://a:1,http://b:1", "--replicas", "3"
    )
    with pytest.raises(SystemExit, match="--replicas 3 but 2 servers in --url"):
        actor_args(parse(mismatch))


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
    from rltap.train.config import add_train_arguments, parse_with_config

    config = tmp_path / "run.yaml"
    config.write_text(f"agent: a.py:A\ndata: d\nmodel: m\nout: o\nray: {value}\n")
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    assert parse_with_config(parser, ["--config", str(config)]).ray == address
