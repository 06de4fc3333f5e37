"""`RolloutActor`: one engine replica, its own proxy on 127.0.0.1 and the agent's workflow, in
one Ray actor process. The driver hands it episodes (`run_lines`) and, in training, weights
(`update_weights`: a state dict from the object store, or a folder a server reads).

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
from rltap.rollout.files import EpisodeLines
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
        try:
            serving, workflow = await self._stack.enter_async_context(local_workflow(config))
        except SystemExit as exc:  # a flag refused: its message, not a worker that exited
            raise ValueError(str(exc)) from None
        self._serving, self._episodes = serving, LocalEpisodes(workflow)
        node = str(ray.get_runtime_context().get_node_id())
        return ActorInfo(os.getpid(), node, serving.url, serving.pad_token_id, self.version())

    async def run_lines(
        self, row: int, episode: int, data: Any, sampling: EpisodeSampling | None = None
    ) -> EpisodeLines:
        """One episode through this actor's proxy, as its trajectory lines."""
        assert self._episodes is not None, "start() first"
        return await self._episodes.run_lines(row, episode, data, sampling)

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
