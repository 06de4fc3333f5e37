"""`rltap train` on several trainer ranks: rank 0 leads, the others follow.

Rank 0 runs the loop as at world size 1 (the proxy, the engine, rollouts, evaluation, the run
folder); every collective of the trainer goes through its `RankLeader`, which first tells the
other ranks what to join (`torch.distributed.broadcast_object_list` from rank 0) and then joins it
itself. The other ranks only `follow`: they wait for the next command and run it on their trainer
(its own shard of the FSDP2 model):

- `step(packs, version)`: the step's packs go to every rank, and every rank runs
  `PolicyTrainer.step` on them (each trains on its deal, `rltap.train.distributed`);
- `weights()`: the model's full state dict, gathered onto rank 0 (`full_state_dict`, a
  collective), as a `FullModel` a weight sync pushes and a checkpoint saves;
- `optimizer_state()`: AdamW's whole state gathered onto rank 0, in the layout
  `optimizer.state_dict()` has at world size 1 (so a checkpoint loads at world size 1);
- `stop()`: the followers return.

At world size 1 no command is sent: `weights()` is the trainer's model itself and
`optimizer_state()` the optimizer's state dict, so a single process runs the very same loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rltap.record.errors import RltapError
from rltap.record.pack import TreePack
from rltap.train.distributed import Ranks, full_state_dict
from rltap.train.trainer import PolicyTrainer

__all__ = ["FullModel", "RankLeader", "follow", "full_optimizer_state"]


class FullModel:
    """A sharded model's full weights on rank 0: its gathered state dict, saved with the model's
    own `save_pretrained` (config, generation config, safetensors)."""

    def __init__(self, model: Any, state: dict[str, torch.Tensor]) -> None:
        self.model = model
        self.state = state
        self.generation_config = getattr(model, "generation_config", None)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.state

    def save_pretrained(self, folder: str | Path, **kwargs: Any) -> None:
        self.model.save_pretrained(folder, state_dict=self.state, **kwargs)


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Any:
    """`optimizer`'s whole state on rank 0 (a collective: every rank calls it; the others get an
    empty dict), keyed by parameter index as `optimizer.state_dict()` is at world size 1."""
    if Ranks.current().world == 1:
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    named: Any = get_optimizer_state_dict(model, optimizer, options=options)
    if not named:
        return {}
    index: dict[str, int] = {}
    groups = []
    for group in named["param_groups"]:
        ids = [index.setdefault(name, len(index)) for name in group["params"]]
        groups.append({**group, "params": ids})
    state = {index[name]: value for name, value in named["state"].items()}
    return {"state": state, "param_groups": groups}


@dataclass(slots=True)
class RankLeader:
    """Rank 0's trainer, telling the other ranks (`follow`) each collective it joins."""

    trainer: PolicyTrainer
    ranks: Ranks

    def step(self, packs: Sequence[TreePack], version: int) -> dict[str, float]:
        self._tell("step", list(packs), version)
        return self.trainer.step(packs, version)

    def weights(self) -> Any:
        """The weights to push or save: the model (world size 1), or a `FullModel`."""
        if self.ranks.world == 1:
            return self.trainer.model
        self._tell("weights")
        return FullModel(self.trainer.model, full_state_dict(self.trainer.model))

    def optimizer_state(self) -> Any:
        self._tell("optimizer")
        return full_optimizer_state(self.trainer.model, self.trainer.optimizer)

    def stop(self) -> None:
        self._tell("stop")

    def _tell(self, *command: Any) -> None:
        if self.ranks.world > 1:
            dist.broadcast_object_list([command], src=0)


def follow(trainer: PolicyTrainer) -> None:
    """A rank > 0: run rank 0's commands (`RankLeader`) on `trainer` until it stops."""
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        kind, *args = box[0]
        if kind == "step":
            trainer.step(*args)
        elif kind == "weights":
            full_state_dict(trainer.model)
        elif kind == "optimizer":
            full_optimizer_state(trainer.model, trainer.optimizer)
        elif kind == "stop":
            return
        else:
            msg = f"rank {dist.get_rank()}: unknown command from rank 0: {kind!r}"
            raise RltapError(msg)
