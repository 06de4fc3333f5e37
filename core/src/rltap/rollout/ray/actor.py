"""`RolloutActor`: one engine replica, its own proxy on 127.0.0.1 and the agent's workflow, in
one Ray actor process. The driver hands it episodes (`run_episode`, which hands back each
episode's `EpisodeData`: its lines and, with style tree, its pack as the proxy exported it) and,
in training, weights (`update_weights`: a state dict from the object store, or a folder a server
reads).

The agent runs inside the actor, inline (in its event loop) or in its subprocess pool, and
talks to this actor's proxy: its `base_url` is the actor's, so agent code and framework
adapters run as they do on one machine.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rltap.config import RolloutConfig
from rltap.record.sampling import EpisodeSampling
from rltap.rollout.batch import EpisodeData
from rltap.rollout.runner import LocalEpisodes
from rltap.rollout.serving import Serving, local_workflow

if TYPE_CHECKING:
    from rltap.engines.base import InferenceEngine, WeightSource

__all__ = ["ActorInfo", "RolloutActor"]


@dataclass(slots=True, frozen=True)
class ActorInfo:
    """What a started actor reports: where it runs, its proxy, its engine's version."""

    pid: int
    node_id: str
    proxy_url: str
    pad_token_id: int
    version: int


class RolloutActor:
    """The body of a Ray actor (`ray.remote(RolloutActor)`); its methods are async, so Ray runs
    them concurrently on one event loop, the proxy's."""

    def __init__(self, config: RolloutConfig) -> None:
        self._config = config
        self._stack = contextlib.AsyncExitStack()
        self._serving: Serving | None = None
        self._episodes: LocalEpisodes | None = None

    async def start(self) -> ActorInfo:
        """Build the engine and proxy, then the agent's workflow against that proxy."""
        import ray
        from transformers.utils import logging as transformers_logging

        # A "Loading weights" bar per actor would go to the driver's terminal through Ray.
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        config = self._config
        if ray.get_gpu_ids():  # GPUs Ray gave this actor: the embedded engine runs there
            config = config.with_serve(config.serve.with_engine(device="cuda"))
        # A setting refused raises its error (ConfigError, an RltapError), which reaches the
        # driver through Ray as itself (`ray_actors` says why the actors did not start).
        serving, workflow = await self._stack.enter_async_context(local_workflow(config))
        self._serving, self._episodes = serving, LocalEpisodes(workflow)
        node = str(ray.get_runtime_context().get_node_id())
        return ActorInfo(os.getpid(), node, serving.url, serving.pad_token_id, self.version())

    async def run_episode(
        self, row: int, episode: int, data: Any, sampling: EpisodeSampling | None = None
    ) -> EpisodeData:
        """One episode through this actor's proxy: its data, as on one machine."""
        assert self._episodes is not None, "start() first"
        return await self._episodes.run_episode(row, episode, data, sampling)

    async def update_weights(self, source: WeightSource, version: int) -> int:
        """The trainer's weights into this actor's engine (a state dict Ray resolved from the
        object store, or a `WeightFolder` its server reads); returns the engine's version."""
        return await self._engine().update_weights(source, version=version)

    def version(self) -> int:
        return self._engine().version

    async def stop(self) -> None:
        """Close the workflow (its subprocess pool), the proxy and the engine."""
        await self._stack.aclose()

    def _engine(self) -> InferenceEngine:
        assert self._serving is not None, "start() first"
        return self._serving.engine
