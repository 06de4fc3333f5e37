"""`rltap rollout --ray` and `rltap train --ray`: the actors started, used, then stopped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rich.console import Console

from rltap.config import ConfigError, RolloutConfig
from rltap.config.serve import SERVER_ENGINES
from rltap.record.sampling import EpisodeSampling
from rltap.rollout.batch import RolloutBatch
from rltap.rollout.ray.cluster import connect, require_ray, start_actors
from rltap.rollout.ray.pool import ActorPool, NoLiveActors
from rltap.rollout.ray.weights import RayWeightSync
from rltap.rollout.runner import load_rows, rollout_rows

__all__ = ["ray_actors", "ray_rollout", "ray_training"]

logger = logging.getLogger("rltap.rollout.ray")
_STOP_SECONDS = 10.0


@contextlib.asynccontextmanager
async def ray_actors(config: RolloutConfig) -> AsyncIterator[ActorPool]:
    """The rollout actors of `config`, started (engines loaded, proxies up), as a pool; each
    holds up to `concurrency x group_size` episodes at once. Stopped and killed at the end."""
    ray = connect(config.ray.ray)
    handles = start_actors(config)
    try:
        try:
            infos = await asyncio.gather(*(handle.start.remote() for handle in handles))
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None)  # what start() raised, past Ray's wrapping
            msg = f"the rollout actors did not start: {cause or exc}"
            raise NoLiveActors(msg) from exc
        yield ActorPool(
            handles,
            list(infos),
            per_actor=config.episodes.concurrency * config.episodes.group_size,
            max_retries=config.ray.max_retries,
            style=config.style,
        )
    finally:
        await _stop(handles)


async def _stop(handles: list[Any]) -> None:
    """Close each actor's workflow, proxy and engine (its agent subprocesses too), then end
    the actor; one already dead or stuck is just killed."""
    ray = require_ray()
    stops = [asyncio.wait_for(handle.stop.remote(), _STOP_SECONDS) for handle in handles]
    for result in await asyncio.gather(*stops, return_exceptions=True):
        if isinstance(result, Exception) and not isinstance(result, ray.exceptions.RayActorError):
            logger.warning("a rollout actor did not stop cleanly: %r", result)
    for handle in handles:
        ray.kill(handle)


async def ray_rollout(
    config: RolloutConfig, console: Console, sampling: EpisodeSampling | None = None
) -> RolloutBatch:
    """`rltap rollout --ray`: the rows' episodes on the actors, their data handed back here and
    the files written here; the episodes sampled by `sampling` (default: `--seed`'s).
    `NoLiveActors` when every actor is gone: the rows finished so far are in the files, and
    running again resumes after them."""
    if config.proxy:
        raise ConfigError("--ray starts a proxy in each rollout actor: it takes no --proxy")
    rows = load_rows(Path(config.data))
    async with ray_actors(config) as pool:
        return await rollout_rows(config, pool, rows, pool.pad_token_id, console, sampling)


@contextlib.asynccontextmanager
async def ray_training(
    config: RolloutConfig, sync_dir: Path
) -> AsyncIterator[tuple[ActorPool, RayWeightSync]]:
    """`rltap train --ray`: the actors (each step's rollouts, `TrainConfig.rollout()`) and the
    sync of every one's weights. `NoLiveActors` when every actor is gone: the last checkpoint
    is where a new run resumes."""
    async with ray_actors(config) as pool:
        embedded = config.serve.engine.engine not in SERVER_ENGINES
        yield pool, RayWeightSync(pool, sync_dir, embedded=embedded)
