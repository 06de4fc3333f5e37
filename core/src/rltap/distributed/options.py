"""The `--ray` flags of `rltap rollout` and `rltap train` (cheap to import: no Ray)."""

from __future__ import annotations

import argparse

__all__ = ["add_ray_arguments"]


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """`--ray [ADDRESS]`, the replicas and each rollout actor's resources."""
    ray = parser.add_argument_group("ray (pip install 'rltap[ray]')")
    ray.add_argument(
        "--ray", nargs="?", const="", default=None, metavar="ADDRESS",
        help="run the episodes on rollout actors of a Ray cluster (ray.init(ADDRESS); a new "
        "local cluster without one), each with its own engine and proxy",
    )  # fmt: skip
    ray.add_argument(
        "--replicas", type=int, default=None,
        help="embedded engines, one actor each (default 1); with --engine vllm or sglang one "
        "actor per server of a comma-separated --url",
    )  # fmt: skip
    ray.add_argument("--actor-cpus", type=float, default=1.0, help="CPUs per actor (default 1)")
    ray.add_argument("--actor-gpus", type=float, default=0.0, help="GPUs per actor (default 0)")
    ray.add_argument(
        "--max-retries", type=int, default=2,
        help="times an episode lost with its actor runs again on another (default 2)",
    )  # fmt: skip
