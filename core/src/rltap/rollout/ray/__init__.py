"""Rollouts and training on a Ray cluster: one rollout actor per engine replica, each with its
own proxy, the driver dispatching episodes and writing the files (`rltap rollout --ray`,
`rltap train --ray`; docs/distributed.md).

    cluster   ray.init, where each actor goes (`start_actors`, `server_node`)
    actor     RolloutActor: engine + proxy + the agent's workflow in one actor process
    pool      ActorPool: least loaded first, bounded in flight, lost episodes run again
    weights   RayWeightSync: the trainer's weights into every actor's engine, same version
    runs      the two commands' setups

Ray is the `rltap[ray]` extra; this package imports it only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rltap._lazy import lazy_getattr
from rltap.rollout.ray.cluster import RAY_EXTRA, require_ray
from rltap.rollout.ray.pool import NoLiveActors

if TYPE_CHECKING:
    from rltap.rollout.ray.actor import ActorInfo, RolloutActor
    from rltap.rollout.ray.pool import ActorPool
    from rltap.rollout.ray.runs import ray_actors, ray_rollout, ray_training
    from rltap.rollout.ray.weights import RayWeightSync

__all__ = [
    "RAY_EXTRA",
    "ActorInfo",
    "ActorPool",
    "NoLiveActors",
    "RayWeightSync",
    "RolloutActor",
    "ray_actors",
    "ray_rollout",
    "ray_training",
    "require_ray",
]

_lazy_getattr = lazy_getattr(
    "rltap.rollout.ray",
    globals(),
    {
        "ActorInfo": "rltap.rollout.ray.actor",
        "RolloutActor": "rltap.rollout.ray.actor",
        "ActorPool": "rltap.rollout.ray.pool",
        "RayWeightSync": "rltap.rollout.ray.weights",
        **dict.fromkeys(("ray_actors", "ray_rollout", "ray_training"), "rltap.rollout.ray.runs"),
    },
)


def __getattr__(name: str) -> Any:
    return _lazy_getattr(name)
