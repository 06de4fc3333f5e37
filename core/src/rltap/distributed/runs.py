"""`rltap rollout --ray` and `rltap train --ray`: the actors started, used, then stopped."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rich.console import Console

from rltap.distributed.cluster import connect, require_ray, start_actors
from rltap.distributed.pool import ActorPool, NoLiveActors
from rltap.distributed.weights import RayWeightSync
from rltap.engines.factory import SERVER_ENGINES
from rltap.export import ExportStyle
from rltap.rollout import RolloutSummary, load_rows, rollout_rows

__all__ = ["ray_actors", "ray_rollout", "ray_training"]

logger = logging.getLogger("rltap.distributed")
_STOP_SECONDS = 10.0


@contextlib.asynccontextmanager
async def ray_actors(args: argparse.Namespace, style: ExportStyle) -> AsyncIterator[ActorPool]:
    """The rollout actors of the flags, started (engines loaded, proxies up), as a pool; each
    holds up to `concurrency x group_size` episodes at once. Stopped and killed at the end."""
    ray = connect(args.ray)
    handles = start_actors(args, style)
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
            per_actor=args.concurrency * args.group_size,
            max_retries=args.max_retries,
            style=style,
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


async def ray_rollout(args: argparse.Namespace, console: Console) -> RolloutSummary:
    """`rltap rollout --ray`: the rows' episodes on the actors, the files written here."""
    if args.proxy:
        raise SystemExit("--ray starts a proxy in each rollout actor: it takes no --proxy")
    rows = load_rows(Path(args.data))
    try:
        async with ray_actors(args, args.style) as pool:
            return await rollout_rows(args, pool, rows, pool.pad_token_id, console)
    except NoLiveActors as exc:  # the rows finished so far are in the files: run again
        raise SystemExit(f"rltap rollout: {exc}") from exc


@contextlib.asynccontextmanager
async def ray_training(
    args: argparse.Namespace, sync_dir: Path
) -> AsyncIterator[tuple[ActorPool, RayWeightSync]]:
    """`rltap train --ray`: the actors (style tree) and the sync of every one's weights."""
    try:
        async with ray_actors(args, "tree") as pool:
            embedded = args.engine not in SERVER_ENGINES
            yield pool, RayWeightSync(pool, sync_dir, embedded=embedded)
    except NoLiveActors as exc:  # the last checkpoint is where a new run resumes
        raise SystemExit(f"rltap train: {exc}") from exc
