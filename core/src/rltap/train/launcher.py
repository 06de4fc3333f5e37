"""How the trainer's ranks start and join: torch's launcher and process group.

`process_group()` joins the ranks a launcher started (torchrun's, or `launch`'s: the `RANK`,
`WORLD_SIZE`, `MASTER_ADDR` variables), NCCL on GPUs and gloo on CPUs; a group a launcher
already made (Ray Train's) is joined as it is. Asked for NCCL where it cannot run (no GPU), it
says so in one line and uses gloo. Every collective fails after `timeout` seconds: the ranks
other than 0 wait in one through rank 0's rollouts, so it must be longer than the longest.

`launch(entrypoint, args, nproc)` starts `nproc` ranks on this machine with torch's elastic
launcher (what `torchrun --standalone` runs: a c10d rendezvous on a free local port, no
restart), each rank's output written to `log_dir/.../<rank>/stdout.log` and `stderr.log`
(rank 0's also shown); it waits for them and returns each rank's return value. A rank that fails (an
exception, or a signal: a SIGKILL, the OOM killer) fails the launch with `RankFailed`, naming the
rank, its error and its last lines of output; the launcher stops the others, so no rank outlives
it (a rank stuck in a collective with the dead one is stopped, not waited for).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist

from rltap.config.train import Backend
from rltap.record.errors import RltapError
from rltap.train.distributed import Ranks

__all__ = ["LOG_LINES", "RankFailed", "launch", "process_group"]

T = TypeVar("T")

# How much of a failed rank's output `RankFailed` quotes.
LOG_LINES = 20


class RankFailed(RltapError):
    """A trainer rank started by `launch` failed; the message names it and its error."""


@contextlib.contextmanager
def process_group(backend: Backend = "auto", timeout: float | None = None) -> Iterator[Ranks]:
    """This process as a rank of the group a launcher started (env:// rendezvous; `backend`
    "auto": NCCL when a GPU is visible, else gloo), destroyed on exit; a group already
    initialized (by Ray Train, say) is used as it is and left to its maker; without a
    launcher's `WORLD_SIZE`, rank 0 of 1 and no group (a launcher's single rank gets a group of
    one: the trainer shards over it, FSDP2's precision and offload applying on one GPU).
    `timeout`: seconds a collective may wait (torch's default without)."""
    if dist.is_available() and dist.is_initialized():
        yield Ranks.current()
        return
    if "WORLD_SIZE" not in os.environ:
        yield Ranks()
        return
    chosen = _backend(backend)
    if chosen == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    wait = None if timeout is None else datetime.timedelta(seconds=timeout)
    dist.init_process_group(chosen, timeout=wait)
    try:
        yield Ranks.current()
    finally:
        dist.destroy_process_group()


def _backend(asked: Backend) -> str:
    """The backend to run: NCCL where it can (a GPU, a torch built with it), else gloo; NCCL
    asked for where it cannot run falls back to gloo with a line that says so (rank 0's)."""
    nccl = torch.cuda.is_available() and dist.is_nccl_available()
    if asked == "gloo" or (asked == "auto" and not nccl):
        return "gloo"
    if asked == "nccl" and not nccl:
        if os.environ.get("RANK", "0") == "0":
            print(  # before any console exists: the launcher's own line
                "rltap: NCCL needs a GPU and this machine has none visible (or torch lacks "
                "NCCL): the trainer ranks use gloo",
                file=sys.stderr,
            )
        return "gloo"
    return "nccl"


def launch(
    entrypoint: Callable[..., T],
    args: tuple[Any, ...],
    nproc: int,
    *,
    log_dir: Path | None = None,
) -> list[T]:
    """Run `entrypoint(*args)` in `nproc` new ranks on this machine (torch's elastic launcher,
    as `torchrun --standalone --nproc-per-node nproc` would); their return values, by rank.
    `entrypoint` must be importable by name (the ranks are spawned, not forked). Each rank's
    output is kept in `log_dir` (a temporary folder, removed afterwards, without one)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    logs = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="rltap-ranks-"))
    others = range(1, nproc)
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
        # Every rank's output goes to its files; only rank 0's is also shown (the others'
        # would interleave with its progress display).
        logs_specs=DefaultLogsSpecs(
            log_dir=str(logs), redirects=Std.ALL, tee={0: Std.ALL} | dict.fromkeys(others, Std.NONE)
        ),
    )
    try:
        results = elastic_launch(config, _recorded)(entrypoint, *args)
    except ChildFailedError as exc:
        failures = "\n".join(
            f"rank {rank}: {_failure_message(failure)}{_last_lines(logs, failure.local_rank)}"
            for rank, failure in sorted(exc.failures.items())
        )
        msg = f"trainer rank failed: {failures}"
        raise RankFailed(msg) from exc
    finally:
        if log_dir is None:
            shutil.rmtree(logs, ignore_errors=True)
    return [results[rank] for rank in range(nproc)]


def _recorded(entrypoint: Callable[..., T], *args: Any) -> T:
    """`entrypoint(*args)` in a launched rank, its exception recorded for the launcher (the
    error file elastic's `ChildFailedError` reads its message and traceback from)."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return cast("T", record(entrypoint)(*args))


def _failure_message(failure: Any) -> str:
    """A failed rank's error (`record`'s error file holds it as {"message": ...}), or the
    launcher's word on how it ended (the signal that killed it), or its exit code."""
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message")
    return str(message) if message else f"exit code {failure.exitcode}"


def _last_lines(logs: Path, local_rank: int) -> str:
    """The last `LOG_LINES` lines the rank wrote to stderr and stdout (the launcher's log
    files: `<logs>/<run>/attempt_0/<rank>/`), indented under the failure."""
    lines: list[str] = []
    for stream in ("stderr.log", "stdout.log"):
        for path in logs.glob(f"*/attempt_*/{local_rank}/{stream}"):
            text = path.read_text(errors="replace").splitlines()
            if text:
                lines.append(f"  last lines of its {stream.removesuffix('.log')}:")
                lines.extend(f"    {line}" for line in text[-LOG_LINES:])
    return "\n" + "\n".join(lines) if lines else ""
