"""`RayWeightSync`: the trainer's weights into every rollout actor's engine after an update.

Each actor hands them to its engine's `update_weights`, as on one machine. Embedded engines get
the state dict through Ray's object store (put once, read by each actor's node) and copy it in
place. vLLM and SGLang servers load the shards the trainer saves once into `folder`, which each
server must read (one machine or a shared disk). A LoRA trainer's adapter alone goes either
way (`rltap.engines.lora`). A model sharded over trainer ranks (`rltap train --ray
--nproc-per-node N`) is never whole in one process: every engine loads the folder rank 0 writes
from the gathered weights (so `folder` must be readable by every actor's node), or gets the
gathered adapter as above. `push` returns once every live actor answered with the new version,
so the next step's rollouts all start on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltap.engines.base import AdapterWeights, WeightFolder, save_weights
from rltap.engines.lora import adapter_folder, adapter_of
from rltap.record.errors import EngineError
from rltap.rollout.ray.cluster import require_ray
from rltap.rollout.ray.pool import ActorPool

if TYPE_CHECKING:
    import torch

__all__ = ["RayWeightSync"]


class RayWeightSync:
    """A `rltap.train.sync.WeightSync` over an `ActorPool`.

    Usage:
        sync = RayWeightSync(pool, Path("RUN/sync"), embedded=True)
        await sync.push(trainer.model, version=1)
    """

    def __init__(self, pool: ActorPool, folder: Path, *, embedded: bool) -> None:
        self.pool = pool
        self.folder = Path(folder).resolve()
        self.embedded = embedded

    async def push(self, model: torch.nn.Module, version: int) -> None:
        whole = callable(getattr(model, "state_dict", None))
        source = await (self._source if whole else self._sharded_source)(model, version)

        def call(actor: Any) -> Any:
            return actor.update_weights.remote(source, version)

        versions = await self.pool.broadcast(call)
        if any(answered != version for answered in versions):
            msg = f"rollout actors report versions {versions} after pushing version {version}"
            raise EngineError(msg)

    async def _source(self, model: torch.nn.Module, version: int) -> Any:
        """What each actor gets of a model whole in this process."""
        source: Any
        adapter = adapter_of(model)  # a LoRA trainer moves its adapter only
        if self.embedded:
            if adapter is None:
                state = {name: value.detach().cpu() for name, value in model.state_dict().items()}
                source = require_ray().put(state)  # each actor gets the state dict Ray resolves
            else:
                tensors = {name: value.cpu() for name, value in adapter.tensors.items()}
                source = require_ray().put(AdapterWeights(adapter.config, tensors, adapter.name))
        elif adapter is None:
            await save_weights(model, self.folder)
            source = WeightFolder(self.folder)  # saved already: the actors' servers load it
        else:
            path = await adapter_folder(model, self.folder, version).written()
            source = WeightFolder(path, adapter=True)
        return source

    async def _sharded_source(self, model: Any, version: int) -> Any:
        """What each actor gets of a model sharded over the trainer ranks (rank 0's
        `rltap.train.leader.ShardedModel`, never whole in one process): the folder its
        `save_pretrained` writes from weights gathered a chunk at a time, which every engine
        reads; with LoRA, the gathered adapter (embedded) or its folder (servers)."""
        if not model.lora:
            await save_weights(model, self.folder)
            return WeightFolder(self.folder)
        if self.embedded:
            adapter = model.adapter()
            tensors = {name: value.cpu() for name, value in adapter.tensors.items()}
            return require_ray().put(AdapterWeights(adapter.config, tensors, adapter.name))
        path = await adapter_folder(model, self.folder, version).written()
        return WeightFolder(path, adapter=True)
