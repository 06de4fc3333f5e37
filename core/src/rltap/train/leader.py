"""`rltap train` on several trainer ranks: rank 0 leads, the others follow.

Rank 0 runs the loop as at world size 1 (the proxy, the engine, rollouts, evaluation, the run
folder); every collective of the trainer goes through its `RankLeader`, which first tells the
other ranks what to join (`torch.distributed.broadcast_object_list` from rank 0) and then joins it
itself. The other ranks only `follow`: they wait for the next command and run it on their trainer
(its own shard of the FSDP2 model):

- `step(packs, version)`: the step's packs go to every rank, and every rank runs
  `PolicyTrainer.step` on them (each trains on its deal, `rltap.train.distributed`);
- `save_model(folder)`: the model's Hugging Face folder (a LoRA model's adapter folder), written
  by rank 0 from weights gathered a chunk at a time (`rltap.train.gather`);
- `adapter()`: a LoRA model's adapter tensors, gathered onto rank 0;
- `gather()`: one pass over the model's tensors, each gathered whole onto rank 0 (on its
  device), which rank 0 streams to an engine that receives tensors (vLLM's weight transfer);
- `save_optimizer(folder)` / `load_optimizer(folder)`: AdamW's state as DCP shards, each rank
  its own part (a checkpoint, and resuming one at any world size);
- `stop()`: the followers return.

`weights()` is what a weight sync pushes and a checkpoint saves: the trainer's model itself
without a process group, else a `ShardedModel`, rank 0's handle whose `save_pretrained` and
`adapter` run the commands above.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from rltap.engines.base import AdapterWeights, NamedTensors
from rltap.engines.lora import is_peft_model
from rltap.record.errors import RltapError
from rltap.record.pack import TreePack
from rltap.train import gather
from rltap.train.distributed import Ranks
from rltap.train.run_dir import Checkpoint, RunDir
from rltap.train.trainer import PolicyTrainer

__all__ = ["RankLeader", "ShardedModel", "follow"]


class ShardedModel:
    """Rank 0's handle on the weights of a model sharded over the trainer ranks: what a weight
    sync and a checkpoint take in place of the model (`save_pretrained`, `generation_config`;
    with LoRA, `adapter()` and `lora`)."""

    def __init__(self, leader: RankLeader) -> None:
        self._leader = leader
        self.model = leader.trainer.model
        self.lora = is_peft_model(self.model)
        self.generation_config = getattr(self.model, "generation_config", None)

    def save_pretrained(self, folder: str | Path, **_: Any) -> None:
        self._leader.save_model(Path(folder))

    def adapter(self) -> AdapterWeights:
        return self._leader.adapter()

    def named_tensors(self) -> NamedTensors:
        """The model's tensors for an engine that receives them: each `tensors()` pass has
        every rank join the gathers."""
        return NamedTensors(gather.named_tensors(self.model).specs, self._leader.gather)


@dataclass(slots=True)
class RankLeader:
    """Rank 0's trainer, telling the other ranks (`follow`) each collective it joins."""

    trainer: PolicyTrainer
    ranks: Ranks

    @property
    def model(self) -> Any:
        """Rank 0's model (with FSDP2, its shard)."""
        return self.trainer.model

    def step(self, packs: Sequence[TreePack], version: int) -> dict[str, float]:
        self._tell("step", list(packs), version)
        return self.trainer.step(packs, version)

    def weights(self) -> Any:
        """The weights to push or save: the model (world size 1), or a `ShardedModel`."""
        if not self.ranks.sharded:
            return self.trainer.model
        return ShardedModel(self)

    def save_model(self, folder: Path) -> None:
        self._tell("save_model", folder)
        _save_model(self.trainer, folder)

    def adapter(self) -> AdapterWeights:
        self._tell("adapter")
        adapter = gather.adapter_weights(self.trainer.model)
        assert adapter is not None  # rank 0's
        return adapter

    def gather(self) -> Iterator[tuple[str, Any]]:
        """One pass of the model's whole tensors on rank 0, the other ranks joining each
        gather; a pass left early still runs the rest of the gathers (the others wait in them)."""
        self._tell("gather")
        tensors = gather.gathered(self.trainer.model, _every, to_cpu=False)
        try:
            for item in tensors:  # noqa: UP028 (`yield from` would close `tensors` on close)
                yield item
        finally:
            for _ in tensors:
                pass

    def save_optimizer(self, folder: Path) -> None:
        self._tell("save_optimizer", folder)
        gather.save_optimizer_state(self.trainer.model, self.trainer.optimizer, folder)

    def load_optimizer(self, folder: Path) -> None:
        self._tell("load_optimizer", folder)
        gather.load_optimizer_state(self.trainer.model, self.trainer.optimizer, folder)

    def save_checkpoint(
        self, run: RunDir, step: int, tokenizer: Any, state: Mapping[str, Any]
    ) -> Checkpoint:
        """`RUN/step-N/`: the weights (with LoRA, the adapter), `tokenizer`, every rank's part
        of AdamW's state and `state` (`RunDir.save_checkpoint`)."""
        return run.save_checkpoint(step, self.weights(), tokenizer, self.save_optimizer, state)

    def stop(self) -> None:
        self._tell("stop")

    def _tell(self, *command: Any) -> None:
        if self.ranks.world > 1:
            dist.broadcast_object_list([command], src=0)


def _save_model(trainer: PolicyTrainer, folder: Path) -> None:
    if trainer.lora:
        gather.save_adapter(trainer.model, folder)
    else:
        gather.save_model(trainer.model, folder)


def _every(name: str) -> bool:
    return True


def _brief(args: list[Any]) -> str:
    """A command's arguments as its log line shows them (a step's packs by count)."""
    return " ".join(f"{len(a)} packs" if isinstance(a, list) else str(a) for a in args)


def follow(trainer: PolicyTrainer) -> None:
    """A rank > 0: run rank 0's commands (`RankLeader`) on `trainer` until it stops."""
    print(f"rank {dist.get_rank()} (pid {os.getpid()}) follows rank 0", file=sys.stderr, flush=True)
    while True:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        kind, *args = box[0]
        # A line per command in this rank's log (RUN/ranks/): what a failure quotes.
        print(f"rank {dist.get_rank()}: {kind} {_brief(args)}", file=sys.stderr, flush=True)
        if kind == "step":
            trainer.step(*args)
        elif kind == "save_model":
            _save_model(trainer, *args)
        elif kind == "adapter":
            gather.adapter_weights(trainer.model)
        elif kind == "gather":
            for _ in gather.gathered(trainer.model, _every, to_cpu=False):
                pass
        elif kind == "save_optimizer":
            gather.save_optimizer_state(trainer.model, trainer.optimizer, *args)
        elif kind == "load_optimizer":
            gather.load_optimizer_state(trainer.model, trainer.optimizer, *args)
        elif kind == "stop":
            return
        else:
            msg = f"rank {dist.get_rank()}: unknown command from rank 0: {kind!r}"
            raise RltapError(msg)
