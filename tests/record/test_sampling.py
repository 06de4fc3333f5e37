"""An episode's sampling settings: a seed per episode and per call, derived, never repeated."""

from __future__ import annotations

import pytest

from rltap.record.errors import InvalidRequest
from rltap.record.sampling import MAX_SEED, EpisodeSampling


def test_each_episode_and_call_gets_a_seed_of_its_own() -> None:
    sampling = EpisodeSampling(seed=5, temperature=0.5)
    episodes = [sampling.for_episode(row, n) for row in range(20) for n in range(8)]
    assert len({e.seed for e in episodes}) == len(episodes)
    assert {e.temperature for e in episodes} == {0.5}
    assert episodes[3] == sampling.for_episode(0, 3)  # a pure function of (seed, row, episode)
    calls = [episodes[0].call_seed(k) for k in range(100)]
    assert len(set(calls)) == 100
    assert all(seed is not None and 0 <= seed <= MAX_SEED for seed in calls)
    unseeded = EpisodeSampling(temperature=0.0)
    assert unseeded.for_episode(1, 1) == unseeded
    assert unseeded.call_seed(0) is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        pytest.param({"seed": -1}, "sampling.seed", id="negative-seed"),
        pytest.param({"temperature": float("nan")}, "sampling.temperature", id="nan-temperature"),
    ],
)
def test_bad_settings_are_refused_naming_them(fields: dict[str, float], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        EpisodeSampling(**fields)  # type: ignore[arg-type]
    assert refused.value.param == param
