"""How the trainer's ranks start and join: torch's launcher and process group.

`process_group()` joins the ranks a launcher started (torchrun's, or `launch`'s: the `RANK`,
`WORLD_SIZE`, `MASTER_ADDR` variables), gloo on CPU and NCCL on GPUs; `launch(entrypoint, args,
nproc)` starts `nproc` ranks on this machine with torch's elastic launcher (what `torchrun
--standalone` runs: a c10d rendezvous on a free local port, no restart), waits for them and
returns each rank's return value; a rank that fails fails the launch (`RankFailed`, naming it)
and the launcher stops the others: no rank outlives it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist

from rltap.record.errors import RltapError
from rltap.train.distributed import Ranks

__all__ = ["RankFailed", "launch", "process_group"]

T = TypeVar("T")


class RankFailed(RltapError):
    """A trainer rank started by `launch` failed; the message names it and its error."""


@contextlib.contextmanager
def process_group() -> Iterator[Ranks]:
    """This process as a rank of the group a launcher started (env:// rendezvous; NCCL when a
    GPU is visible, else gloo), destroyed on exit; without a launcher's `WORLD_SIZE`, rank 0 of
    1 and no group."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1 and not dist.is_initialized():
        yield Ranks()
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    try:
        yield Ranks.current()
    finally:
        dist.destroy_process_group()


def launch(entrypoint: Callable[..., T], args: tuple[Any, ...], nproc: int) -> list[T]:
    """Run `entrypoint(*args)` in `nproc` new ranks on this machine (torch's elastic launcher,
    as `torchrun --standalone --nproc-per-node nproc` would); their return values, by rank.
    `entrypoint` must be importable by name (the ranks are spawned, not forked)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"rltap-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
    )
    try:
        results = elastic_launch(config, _recorded)(entrypoint, *args)
    except ChildFailedError as exc:
        failures = "; ".join(
            f"rank {rank}: {_failure_message(failure)}"
            for rank, failure in sorted(exc.failures.items())
        )
        msg = f"trainer rank failed: {failures}"
        raise RankFailed(msg) from exc
    return [results[rank] for rank in range(nproc)]


def _recorded(entrypoint: Callable[..., T], *args: Any) -> T:
    """`entrypoint(*args)` in a launched rank, its exception recorded for the launcher (the
    error file elastic's `ChildFailedError` reads its message and traceback from)."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return cast("T", record(entrypoint)(*args))


def _failure_message(failure: Any) -> str:
    """A failed rank's error (`record`'s error file holds it as {"message": ...}), or its exit."""
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message")
    return str(message) if message and failure.error_file else f"exit code {failure.exitcode}"
