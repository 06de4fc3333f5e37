"""`ActorPool`: hands episodes to the rollout actors and gets them back, whatever dies.

Each episode goes to the live actor with the fewest episodes in flight, and no actor holds
more than `per_actor` at once (a caller asking for more waits for a free slot). An actor that
dies (killed, its process or node lost) fails every call it had in flight with a
`RayActorError`: the actor is dropped and each of those episodes runs again on another one, up
to `max_retries` times, after which it counts as failed. Nothing of a lost episode reached the
driver, and the driver alone writes the files, so nothing is written twice. When no actor is
left, every waiting and later call raises `NoLiveActors`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from rltap.record.errors import RltapError
from rltap.record.sampling import EpisodeSampling
from rltap.rollout.batch import EpisodeData
from rltap.tree.export import ExportStyle

if TYPE_CHECKING:
    from rltap.rollout.ray.actor import ActorInfo

__all__ = ["ActorPool", "NoLiveActors"]

logger = logging.getLogger("rltap.rollout.ray")
T = TypeVar("T")


class NoLiveActors(RltapError, RuntimeError):
    """Every rollout actor of the run is gone (or none started): nothing can run."""


@dataclass(slots=True)
class _Slot:
    handle: Any  # a Ray ActorHandle of RolloutActor
    info: ActorInfo
    in_flight: int = 0
    alive: bool = True


class ActorPool:
    """The run's rollout actors as one `rltap.rollout.runner.EpisodeRunner`.

    Usage:
        pool = ActorPool(handles, infos, per_actor=16, max_retries=2, style="individual")
        batch = await run_rollout(pool, rows, out_dir, group_size=4)
    """

    def __init__(
        self,
        handles: list[Any],
        infos: list[ActorInfo],
        *,
        per_actor: int,
        max_retries: int,
        style: ExportStyle,
    ) -> None:
        self._slots = [_Slot(handle, info) for handle, info in zip(handles, infos, strict=True)]
        self.per_actor = max(1, per_actor)
        self.max_retries = max(0, max_retries)
        self.style: ExportStyle = style
        self.pad_token_id = infos[0].pad_token_id if infos else 0
        self._changed = asyncio.Condition()

    @property
    def live(self) -> list[ActorInfo]:
        return [slot.info for slot in self._slots if slot.alive]

    def rows_in_flight(self, requested: int) -> int:
        """`requested` rows per live actor: each actor's slots bound the episodes."""
        return requested * max(1, len(self.live))

    async def run_episode(
        self, row: int, episode: int, data: Any, sampling: EpisodeSampling | None = None
    ) -> EpisodeData:
        """Episode `episode` of `row` on the least loaded live actor; again on another when
        that actor dies, `max_retries` times at most."""
        from ray.exceptions import RayActorError

        lost = 0
        while True:
            slot = await self._acquire()
            try:
                run = slot.handle.run_episode.remote(row, episode, data, sampling)
                result: EpisodeData = await run
            except RayActorError as exc:
                await self._lose(slot, exc)
                lost += 1
                if lost > self.max_retries:
                    error = f"lost with {lost} rollout actors: {type(exc).__name__}: {exc}"
                    return EpisodeData(session_id="", lines=None, error=error, retries=lost - 1)
                continue
            finally:
                await self._release(slot)
            result.retries = lost
            return result

    async def broadcast(self, call: Callable[[Any], Awaitable[T]]) -> list[T]:
        """`call(handle)` on every live actor at once; an actor that dies meanwhile is dropped;
        the results of those that answered."""
        from ray.exceptions import RayActorError

        slots = [slot for slot in self._slots if slot.alive]
        results = await asyncio.gather(*(call(s.handle) for s in slots), return_exceptions=True)
        answered: list[T] = []
        for slot, result in zip(slots, results, strict=True):
            if isinstance(result, RayActorError):
                await self._lose(slot, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                answered.append(result)
        if not answered:
            raise self._none_left()
        return answered

    async def _acquire(self) -> _Slot:
        async with self._changed:
            while True:
                live = [slot for slot in self._slots if slot.alive]
                if not live:
                    raise self._none_left()
                free = [slot for slot in live if slot.in_flight < self.per_actor]
                if free:
                    slot = min(free, key=lambda s: s.in_flight)
                    slot.in_flight += 1
                    return slot
                await self._changed.wait()

    async def _release(self, slot: _Slot) -> None:
        async with self._changed:
            slot.in_flight -= 1
            self._changed.notify_all()

    async def _lose(self, slot: _Slot, exc: BaseException) -> None:
        async with self._changed:
            if slot.alive:
                slot.alive = False
                left = sum(s.alive for s in self._slots)
                logger.warning("rollout actor pid %d lost (%s); %d left", slot.info.pid, exc, left)
            self._changed.notify_all()

    def _none_left(self) -> NoLiveActors:
        count = len(self._slots)
        return NoLiveActors(f"no live rollout actor left (all {count} of the run's are gone)")
