"""The public surface, the declared TRL range, the reward function and the rollout's thread."""

from __future__ import annotations

import threading
from importlib.metadata import requires, version
from typing import Any

import pytest
from conftest import repeated
from packaging.requirements import Requirement
from trl_agents import one_call_agent

import rltap_trl
from rltap_trl import AgentRollout, rltap_reward

EXPECTED_ALL = [
    "REWARD_FIELD",
    "SESSION_FIELD",
    "TRL_REQUIREMENT",
    "AgentRollout",
    "TooManyBranches",
    "UnsupportedTrainer",
    "rltap_reward",
]


def test_all_is_the_declared_public_api() -> None:
    assert sorted(EXPECTED_ALL) == sorted(rltap_trl.__all__)
    for name in rltap_trl.__all__:
        assert getattr(rltap_trl, name) is not None


def test_installed_trl_is_in_the_declared_range() -> None:
    wanted = Requirement(rltap_trl.TRL_REQUIREMENT)
    assert wanted.specifier.contains(version("trl"))
    assert wanted in [Requirement(line) for line in requires("rltap-trl") or []]
    assert AgentRollout(one_call_agent()).trl_version == version("trl")


def test_reward_function_returns_each_rows_reward() -> None:
    rewards = [1.0, None, 0.25]
    assert rltap_reward(["a", "b", "c"], rewards, prompts=["p"] * 3) == rewards
    with pytest.raises(ValueError, match="use rltap_reward with AgentRollout"):
        rltap_reward(["a"], [1.0, 2.0])


def _rollout_threads() -> list[threading.Thread]:
    names = ("rltap-trl-rollout", "rltap-engine")
    return [t for t in threading.enumerate() if t.name.startswith(names)]


def test_close_stops_the_proxy_engine_and_thread(trainer: Any) -> None:
    before = _rollout_threads()
    with AgentRollout(one_call_agent()) as rollout:
        rollout(repeated([{"question": "What is 2+3?", "answer": "5"}]), trainer)
        assert rollout.proxy_url is not None
        assert len(_rollout_threads()) > len(before)
    assert rollout.proxy_url is None
    assert _rollout_threads() == before
