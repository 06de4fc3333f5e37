"""`ActorPool`'s dispatch on real Ray actors that run no engine: the least loaded live actor
first, never more than `per_actor` episodes on one, an episode lost with its actor run again
elsewhere at most `max_retries` times, and `NoLiveActors` once every actor is gone."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import ray

from rltap.distributed import ActorInfo, ActorPool, NoLiveActors
from rltap.rollout_io import EpisodeLines


def _echo_actor() -> type:
    """The actor class, defined here so that Ray ships it by value (workers cannot import
    this test module by name)."""

    class EchoActor:
        """Runs an "episode" by sleeping `data` seconds (or ending its process when `data` is
        "die"); counts the episodes it holds at once."""

        def __init__(self) -> None:
            self.now = 0
            self.most = 0
            self.ran: list[int] = []

        async def run_lines(self, row: int, episode: int, data: Any) -> EpisodeLines:
            if data == "die":
                os._exit(1)
            self.now += 1
            self.most = max(self.most, self.now)
            await asyncio.sleep(data)
            self.now -= 1
            self.ran.append(row)
            line = {"row": row, "episode": episode, "pid": os.getpid()}
            return EpisodeLines(session_id=f"s-{row}-{episode}", lines=[line])

        def stats(self) -> tuple[int, list[int]]:
            return self.most, self.ran

    return EchoActor


@pytest.fixture
async def make_pool(ray_address: str) -> AsyncIterator[Callable[..., tuple[ActorPool, list[Any]]]]:
    """Pools of fresh `EchoActor`s (no CPU reserved: they only sleep), and their handles."""
    handles: list[Any] = []

    def make(actors: int, **options: Any) -> tuple[ActorPool, list[Any]]:
        remote = ray.remote(num_cpus=0, max_restarts=0)(_echo_actor())
        started = [remote.remote() for _ in range(actors)]
        handles.extend(started)
        infos = [ActorInfo(i, "node", f"http://actor-{i}", 0, 0) for i in range(actors)]
        return ActorPool(started, infos, style="individual", **options), started

    yield make
    for handle in handles:
        ray.kill(handle)


async def test_episodes_go_to_the_least_loaded_actor_and_never_beyond_its_bound(
    make_pool: Callable[..., tuple[ActorPool, list[Any]]],
) -> None:
    pool, handles = make_pool(2, per_actor=2, max_retries=0)
    results = await asyncio.gather(*(pool.run_lines(row, 0, 0.2) for row in range(8)))
    assert [r.lines[0]["row"] for r in results if r.lines] == list(range(8))
    stats = [await handle.stats.remote() for handle in handles]
    assert [most for most, _ in stats] == [2, 2]
    assert sorted(len(ran) for _, ran in stats) == [4, 4]
    assert all(r.retries == 0 for r in results)
    # With room to spare on each, episodes still spread: the least loaded actor goes first.
    roomy, handles = make_pool(2, per_actor=10, max_retries=0)
    await asyncio.gather(*(roomy.run_lines(row, 0, 0.2) for row in range(4)))
    assert [len((await handle.stats.remote())[1]) for handle in handles] == [2, 2]


async def test_a_lost_episode_runs_again_elsewhere_at_most_max_retries_times(
    make_pool: Callable[..., tuple[ActorPool, list[Any]]],
) -> None:
    pool, _ = make_pool(3, per_actor=4, max_retries=1)
    lost = await pool.run_lines(7, 1, "die")  # kills the actor it lands on, then the next one
    assert lost.lines is None
    assert lost.retries == 1
    assert lost.error is not None
    assert lost.error.startswith("lost with 2 rollout actors: ActorDiedError")
    assert len(pool.live) == 1
    survived = await pool.run_lines(8, 0, 0.0)  # the last actor still runs episodes
    assert survived.lines == [{"row": 8, "episode": 0, "pid": survived.lines[0]["pid"]}]
    with pytest.raises(NoLiveActors, match=r"no live rollout actor left \(all 3"):
        await pool.run_lines(9, 0, "die")
    with pytest.raises(NoLiveActors):
        await pool.run_lines(10, 0, 0.0)
