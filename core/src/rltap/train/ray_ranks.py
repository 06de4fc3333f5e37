"""`rltap train --ray --nproc-per-node N`: the trainer ranks as Ray Train workers on the cluster.

Which engine runs the ranks, and why: Ray Train's `TorchTrainer` (`ray.train.torch`). Without
`--ray` the ranks are processes of torch's elastic launcher on this machine
(`rltap.train.launcher`); with `--ray` the rollouts already run on actors of a Ray cluster
(`rltap.rollout.ray`), and the trainer ranks belong on that cluster too: on its GPU nodes, beside
the rollout actors, under one scheduler that knows what each of them holds. `TorchTrainer` is the
engine Ray ships for exactly that (torchrun's job on a Ray cluster), so rltap writes none of it:

- it places N workers as one placement group (ScalingConfig: N workers, one GPU each when they
  train on GPUs, a CPU each), waits until the cluster can hold all of them, and starts them
  together, on as many nodes as it takes;
- it makes the torch.distributed group itself (TorchConfig: NCCL on GPUs, else gloo; every
  collective times out after `--rank-timeout`), with the `RANK`, `WORLD_SIZE` and `LOCAL_RANK`
  a launcher sets: `rltap.train.launcher.process_group` joins that group as it is, so each
  worker runs the very program a torchrun rank runs (rank 0 leads the loop, the others follow);
- a worker that raises, or whose process or node dies, fails the run (FailureConfig: no retry;
  the loop resumes from its last checkpoint when run again, not from a half-done step), and
  Ray Train stops the other workers, so none is left waiting in a collective;
- its own files (RunConfig storage) go to `RUN/ray-train/`, not to `~/ray_results`.

The other engines were weighed: torch's elastic agent on each node (torchrun) needs every node
reached by hand, outside Ray, and a rendezvous of its own; plain Ray actors that call
`init_process_group` themselves would redo what `TorchTrainer` does (placement, rendezvous, a
dead worker's peers stopped); Ray Train's other trainers drive frameworks (Lightning, Hugging
Face) whose loops rltap does not use. `TorchTrainer` runs any function as each rank's body.

Rank 0's rollouts go to the rollout actors of `rltap.rollout.ray` on the same cluster: the
worker is already connected to it, so `ray_training` starts the actors there (owned by rank 0's
worker, they end with it). The driver, `rltap train` itself, starts or joins the cluster
(`--ray [ADDRESS]`), refuses a cluster too small for the ranks and the rollout actors together
(Ray Train would wait for it forever), runs the trainer and, if it started or joined the
cluster, leaves it on return: a local cluster it started is shut down.

The ranks train on GPUs (one each, NCCL) when the cluster has any, unless `--dist-backend gloo`
keeps them on CPUs, which is how the local rule of `process_group` reads on a cluster ("NCCL when
a GPU is visible"); GPUs a cluster has for other work (the engine servers') are kept out of it
when their nodes join (`ray start --num-gpus=0`), as they are out of Ray's hands anyway.

Ray is the `rltap[ray]` extra: this module imports it only when used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from rltap.config import ConfigError, TrainConfig
from rltap.rollout.ray.cluster import actor_configs, connect, require_ray
from rltap.train.launcher import RankFailed

__all__ = [
    "RAY_TRAIN_FOLDER",
    "RayRanks",
    "cluster_ranks",
    "ray_launch",
    "train_on_ray",
]

# Where Ray Train keeps its own files, inside the run folder.
RAY_TRAIN_FOLDER = "ray-train"


@dataclass(frozen=True, slots=True, kw_only=True)
class RayRanks:
    """How `ray_launch` runs the ranks: `nproc` Ray Train workers of `cpus` CPUs each and, with
    `use_gpu`, one GPU each (NCCL, else gloo), their collectives timing out after `timeout`
    seconds, Ray Train's files in `storage`.

    Usage:
        ranks = RayRanks(nproc=2, storage=Path("RUN/ray-train"), timeout=7200.0)
        ray_launch(train_rank, (config,), ranks)  # rltap.train.command.train_rank
    """

    nproc: int
    storage: Path
    timeout: float
    use_gpu: bool = False
    cpus: float = 1.0

    @property
    def backend(self) -> str:
        """torch.distributed's backend: NCCL between GPUs, gloo between CPUs."""
        return "nccl" if self.use_gpu else "gloo"


def ray_launch(entrypoint: Callable[..., Any], args: tuple[Any, ...], ranks: RayRanks) -> None:
    """Run `entrypoint(*args)` in each of `ranks.nproc` Ray Train workers (`TorchTrainer`) on the
    cluster this process is connected to, the process group made, each in this process's
    working directory; returns when all returned. A worker that raises or dies fails the run:
    `RankFailed`, naming each failed rank and its error (Ray Train stops the others)."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
    from ray.train.torch import TorchConfig, TorchTrainer

    storage = Path(ranks.storage).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    job = {"entrypoint": entrypoint, "args": args, "cwd": os.getcwd()}
    # No retry: Ray Train V1 counts every failure in max_failures, V2 a node's preemption apart.
    failure: Any = FailureConfig(max_failures=0)
    if hasattr(failure, "max_preemption_failures"):
        failure.max_preemption_failures = 0
    trainer = TorchTrainer(
        _worker,
        train_loop_config=job,
        torch_config=TorchConfig(backend=ranks.backend, timeout_s=math.ceil(ranks.timeout)),
        scaling_config=ScalingConfig(
            num_workers=ranks.nproc,
            use_gpu=ranks.use_gpu,
            resources_per_worker={"CPU": ranks.cpus, **({"GPU": 1} if ranks.use_gpu else {})},
        ),
        run_config=RunConfig(
            name="ranks",
            storage_path=str(storage),
            failure_config=failure,
        ),
    )
    try:
        trainer.fit()
    except TrainingFailedError as exc:
        raise RankFailed(f"trainer rank failed: {_failures(exc)}") from exc


def _worker(job: dict[str, Any]) -> None:
    """A Ray Train worker's body: the driver's working directory (Ray Train moves each worker
    into a folder of its own, and the run's relative paths are the driver's), then the rank."""
    cwd = job["cwd"]
    if not os.path.isdir(cwd):
        msg = (
            f"the driver's working directory {cwd} is not on this node: start rltap train from "
            "a folder every node has at the same path (the shared disk)"
        )
        raise ConfigError(msg)
    os.chdir(cwd)
    job["entrypoint"](*job["args"])


def _failures(exc: Exception) -> str:
    """Each failed rank and its error (Ray Train V2's `WorkerGroupError`), or else the error
    (the controller's; Ray Train V1's, which names no rank)."""
    failures: dict[int, BaseException] = getattr(exc, "worker_failures", None) or {}
    if not failures:
        cause = getattr(exc, "controller_failure", None) or exc
        return f"{type(cause).__name__}: {cause}"
    return "; ".join(
        f"rank {rank}: {type(error).__name__}: {error}" for rank, error in sorted(failures.items())
    )


def train_on_ray(config: TrainConfig, rank: Callable[[TrainConfig], None]) -> None:
    """`rltap train --ray [ADDRESS] --nproc-per-node N`, the driver: the cluster started or
    joined, the N ranks run (`rank(config)` on each: `rltap.train.command.train_rank`) until
    the run ends, the cluster left (shut down if
    started here). `ConfigError` when the cluster cannot hold the ranks and the rollout
    actors; `RankFailed` when a rank fails."""
    ray = require_ray()
    connected = ray.is_initialized()
    connect(config.ray.ray)
    try:
        ranks = cluster_ranks(ray.cluster_resources(), config)
        if config.ranks.dist_backend == "nccl" and not ranks.use_gpu:
            Console(stderr=True).print(
                "rltap: NCCL needs GPUs and the Ray cluster has none: the trainer ranks use gloo"
            )
        ray_launch(rank, (config,), ranks)
    finally:
        if not connected:
            ray.shutdown()


def cluster_ranks(cluster: dict[str, float], config: TrainConfig) -> RayRanks:
    """The ranks' resources on a cluster of `cluster`'s totals: GPUs when it has any (unless
    --dist-backend gloo); `ConfigError` when it cannot hold them and the rollout actors."""
    nproc, ray_config = config.ranks.nproc_per_node, config.ray
    use_gpu = cluster.get("GPU", 0) > 0 and config.ranks.dist_backend != "gloo"
    ranks = RayRanks(
        nproc=nproc,
        storage=Path(config.out) / RAY_TRAIN_FOLDER,
        timeout=config.ranks.rank_timeout,
        use_gpu=use_gpu,
    )
    actors = len(actor_configs(config.rollout()))
    need = {
        "CPU": nproc * ranks.cpus + actors * ray_config.actor_cpus,
        "GPU": nproc * use_gpu + actors * ray_config.actor_gpus,
    }
    short = [kind for kind, count in need.items() if count > cluster.get(kind, 0)]
    if short:
        has = " and ".join(f"{cluster.get(kind, 0):g} {kind}s" for kind in need)
        wants = " and ".join(f"{need[kind]:g} {kind}s" for kind in need)
        rank_gpu = ", 1 GPU" if use_gpu else ""
        msg = (
            f"the Ray cluster has {has}: {nproc} trainer ranks ({ranks.cpus:g} CPU{rank_gpu} "
            f"each) and {actors} rollout actors (--actor-cpus {ray_config.actor_cpus:g}, "
            f"--actor-gpus {ray_config.actor_gpus:g}) need {wants}"
        )
        raise ConfigError(msg)
    return ranks
