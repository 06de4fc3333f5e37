"""Weight sync: after an update, the engine generates with the trainer's weights and stamps the
new policy version on every token it hands out from then on.

The engine owns how it takes new weights (`InferenceEngine.update_weights`, see each engine's
module for what happens to the requests in flight); the trainer only chooses the source. An
engine that runs in this process (`takes_state_dict`: transformers, scripted) gets the trainer
model's state dict and copies it in place, no disk round trip. A server engine (vLLM, SGLang)
gets a `WeightFolder`: the model is saved there with `save_pretrained` (safetensors), once the
engine has checked that its server can load weights, and the server loads it. The folder must
be readable by the server (same machine or a shared disk); each push overwrites it.

A LoRA trainer (a peft model, `rltap train --lora-rank`) moves only its adapter: an engine in
this process gets an `AdapterWeights` (the peft config and the adapter's tensors), a server
engine a `WeightFolder(adapter=True)` of peft's `save_pretrained` in `folder/adapter-v<N>/`
(`rltap.engines.lora`); the base weights never move.

A server engine whose server receives tensors from this process (`takes_named_tensors`: vLLM
with `--weight-transfer nccl` or `ipc`) gets `NamedTensors` instead, nothing saved: the model's
tensors one whole tensor at a time (`rltap.train.gather.named_tensors`), which it streams to
its server in chunks. A LoRA trainer's adapter still goes by folder.

A model sharded over trainer ranks (`rltap.train.leader.ShardedModel`) is never whole in one
process: every engine gets its `WeightFolder`, written from weights gathered a chunk at a time
(`rltap.train.gather`; the embedded engine reads it into its own copy), or its `NamedTensors`,
each tensor gathered as it is sent, or with LoRA the gathered adapter, as above.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rltap.engines.base import WeightFolder, WeightSource, save_weights
from rltap.engines.lora import adapter_folder, adapter_of, is_peft_model
from rltap.train.gather import named_tensors
from rltap.train.leader import ShardedModel

if TYPE_CHECKING:
    import torch

    from rltap.engines.base import InferenceEngine

__all__ = ["WeightSync", "save_weights", "weight_source", "weight_sync"]


class WeightSync(Protocol):
    """Moves a trainer's weights into an inference engine."""

    async def push(self, model: torch.nn.Module, version: int) -> None:
        """Make the engine generate with `model`'s weights; tokens generated afterwards carry
        `version`."""
        ...


def weight_sync(engine: InferenceEngine, folder: Path) -> WeightSync:
    """The weight sync into `engine`; `folder` is where the weights are saved for an engine
    that loads them from disk."""
    return _EngineSync(engine, folder)


def weight_source(
    model: torch.nn.Module,
    *,
    state_dict: bool,
    folder: Path,
    version: int = 0,
    tensors: bool = False,
) -> WeightSource:
    """`model`'s weights as an engine takes them: its state dict, its `NamedTensors`
    (`tensors`: an engine whose server receives them), or a `WeightFolder` that saves it into
    `folder` when the engine asks; a peft model's adapter alone (`version` names its
    folder)."""
    if isinstance(model, ShardedModel):
        if not model.lora:
            if tensors:
                return model.named_tensors()
            return WeightFolder(Path(folder), save=functools.partial(save_weights, model))
        if state_dict:
            return model.adapter()
        return adapter_folder(model, folder, version)
    if is_peft_model(model):
        adapter = adapter_of(model) if state_dict else None
        return adapter if adapter is not None else adapter_folder(model, folder, version)
    if state_dict:
        return model.state_dict()
    if tensors:
        return named_tensors(model)
    return WeightFolder(Path(folder), save=functools.partial(save_weights, model))


class _EngineSync:
    def __init__(self, engine: InferenceEngine, folder: Path) -> None:
        self.engine = engine
        self.folder = Path(folder)

    async def push(self, model: torch.nn.Module, version: int) -> None:
        source = weight_source(
            model,
            state_dict=self.engine.takes_state_dict,
            folder=self.folder,
            version=version,
            tensors=getattr(self.engine, "takes_named_tensors", False),
        )
        await self.engine.update_weights(source, version=version)
