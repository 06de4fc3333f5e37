"""`RayWeightSync`: the trainer's weights into every rollout actor's engine after an update.

Embedded engines get the state dict through Ray's object store (put once, read by each
actor's node) and copy it in place (`rltap.train.sync.EmbeddedSync`). vLLM and SGLang servers
load shards the trainer saves once into `folder`, which each server must read (one machine or
a shared disk), through the same development API calls as on one machine
(`rltap.train.sync.DiskSync.push_saved`). `push` returns once every live actor answered with
the new version, so the next step's rollouts all start on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltap.distributed.cluster import require_ray
from rltap.distributed.pool import ActorPool
from rltap.record.errors import EngineError
from rltap.train.sync import save_weights

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
        if self.embedded:
            ray = require_ray()
            state = {name: value.detach().cpu() for name, value in model.state_dict().items()}
            ref = ray.put(state)

            def call(actor: Any) -> Any:
                return actor.load_state.remote(ref, version)
        else:
            await save_weights(model, self.folder)
            folder = str(self.folder)

            def call(actor: Any) -> Any:
                return actor.load_shards.remote(folder, version)

        versions = await self.pool.broadcast(call)
        if any(answered != version for answered in versions):
            msg = f"rollout actors report versions {versions} after pushing version {version}"
            raise EngineError(msg)
