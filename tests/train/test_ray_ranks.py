"""`rltap train --ray --nproc-per-node N`: the trainer ranks as Ray Train workers
(`rltap.train.ray_ranks`) on a real local Ray cluster.

- the command starts its own local cluster (`--ray local`), trains 2 steps on 2 ranks with rank
  0's rollouts on a rollout actor of that cluster, prints the run's table and leaves no process
  behind (the cluster is shut down);
- a worker that raises fails the run, naming its rank;
- what the ranks ask of the cluster, and a cluster too small for them refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed_testing import assert_two_steps_trained, fail_in_rank
from process_testing import descendant_pids, left_behind

from rltap.cli.commands import build_parser, main
from rltap.config import ConfigError, TrainConfig, from_namespace
from rltap.train.launcher import RankFailed
from rltap.train.ray_ranks import RayRanks, cluster_ranks, ray_launch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_toy"
TESTS = Path(__file__).resolve().parents[1]
WAIT_SECONDS = 30.0


def _config(*options: str) -> TrainConfig:
    argv = ["train", "agent.py:Agent", "--data", "d", "--model", "m", "--out", "run", *options]
    return from_namespace(TrainConfig, build_parser().parse_args(argv))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_rltap_train_runs_its_ranks_on_ray_train_workers(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 rolls out on the rollout actor, both ranks train, rank 0 syncs the gathered
    weights into the actor's engine and checkpoints them; the cluster the command started
    (2 CPUs here: the ranks take one each, the actor none) ends with it."""
    import ray

    assert not ray.is_initialized()  # the command starts the cluster itself
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run = tmp_path / "run"
    argv = [
        "train", f"{EXAMPLE / 'agent.py'}:Agent", "--data", str(EXAMPLE / "data.jsonl"),
        "--model", str(tiny_model_dir), "--out", str(run), "--engine", "transformers",
        "--steps", "2", "--rows-per-step", "1", "--group-size", "2", "--lr", "1e-3",
        "--nproc-per-node", "2", "--ray", "local", "--replicas", "1", "--actor-cpus", "0",
    ]  # fmt: skip
    before = set(descendant_pids(os.getpid()))
    assert main(argv) == 0
    assert not ray.is_initialized()
    assert left_behind(before, wait=WAIT_SECONDS) == []
    assert_two_steps_trained(run, tiny_model_dir)
    assert any((run / "ray-train").iterdir())  # Ray Train's own files, in the run folder


@pytest.fixture
def ray_cluster() -> Iterator[None]:
    """A local cluster of 2 CPUs whose workers import the tests' rank programs by name
    (`distributed_testing`), as the ranks the elastic launcher spawns do."""
    import ray

    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    try:
        yield
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_a_worker_that_raises_fails_the_run_naming_its_rank(
    ray_cluster: None, tmp_path: Path
) -> None:
    ranks = RayRanks(nproc=2, storage=tmp_path / "ray-train", timeout=60.0)
    with pytest.raises(
        RankFailed, match=r"^trainer rank failed: rank 1: ValueError: rank 1 fails$"
    ):
        ray_launch(fail_in_rank, (1,), ranks)


@pytest.mark.parametrize(
    ("cluster", "options", "expected"),
    [
        pytest.param({"CPU": 2.0}, (), ("gloo", False), id="cpus"),
        pytest.param({"CPU": 8.0, "GPU": 4.0}, (), ("nccl", True), id="gpus"),
        pytest.param(
            {"CPU": 8.0, "GPU": 4.0}, ("--dist-backend", "gloo"), ("gloo", False), id="gloo"
        ),
    ],
)
def test_the_ranks_train_on_gpus_when_the_cluster_has_them(
    cluster: dict[str, float], options: tuple[str, ...], expected: tuple[str, bool]
) -> None:
    config = _config("--ray", "--nproc-per-node", "2", "--actor-cpus", "0", *options)
    ranks = cluster_ranks(cluster, config)
    assert (ranks.backend, ranks.use_gpu) == expected
    assert (ranks.nproc, ranks.cpus, ranks.storage) == (2, 1.0, Path("run") / "ray-train")
    assert ranks.timeout == config.ranks.rank_timeout


def test_a_cluster_too_small_for_the_ranks_and_actors_is_refused() -> None:
    config = _config("--ray", "--nproc-per-node", "2", "--replicas", "2", "--actor-gpus", "1")
    expected = (
        "the Ray cluster has 4 CPUs and 3 GPUs: 2 trainer ranks (1 CPU, 1 GPU each) and 2 "
        "rollout actors (--actor-cpus 1, --actor-gpus 1) need 4 CPUs and 4 GPUs"
    )
    with pytest.raises(ConfigError) as refused:
        cluster_ranks({"CPU": 4.0, "GPU": 3.0}, config)
    assert str(refused.value) == expected
    assert cluster_ranks({"CPU": 4.0, "GPU": 4.0}, config).use_gpu
