"""`rltap.rollout.ray`'s public names, and Ray imported only when used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rltap.rollout.ray

EXPECTED_ALL = [
    "RAY_EXTRA",
    "ActorInfo",
    "ActorPool",
    "NoLiveActors",
    "RayWeightSync",
    "RolloutActor",
    "ray_actors",
    "ray_rollout",
    "ray_training",
    "require_ray",
]


def test_all_is_the_declared_public_api() -> None:
    assert sorted(rltap.rollout.ray.__all__) == sorted(EXPECTED_ALL)


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(rltap.rollout.ray, name) is not None


def test_rltap_and_its_cli_import_without_ray() -> None:
    code = (
        "import sys, rltap, rltap.cli.commands, rltap.rollout.ray, rltap.rollout.runner\n"
        "rltap.cli.commands.build_parser()\n"
        "assert 'ray' not in sys.modules, 'ray imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
