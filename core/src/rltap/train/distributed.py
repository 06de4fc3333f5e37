"""The trainer's ranks on torch's own distributed engine: torch.distributed, FSDP2, its launcher.

One program runs at any world size. `Ranks` is where a trainer rank stands (its rank, the world
size) and the few collectives `PolicyTrainer.step` needs; at world size 1 without a process group
they are the identity, so a single process runs the very same step:

- `deal(pieces)`: a step's packs (already cut at branch points by `split_pack`, where
  `micro_batches` would cut them) dealt to the ranks by token count, largest first, each to the
  rank holding the fewest tokens; every rank computes the same deal from the same packs;
- `all_sum` and `all_max`: the step's global trainable-token count (the loss is divided by it, so
  the summed gradient of all ranks is the single process's), its metrics, and the number of
  micro-batches every rank runs (FSDP2 gathers each layer's weights in every forward, a
  collective: a rank with fewer micro-batches runs filler ones that add nothing).

`shard_model` applies FSDP2 (`fully_shard`) to each decoder layer (the model's
`_no_split_modules`), then to the root (the trainer's `TokenScorer`, whose forward runs the whole
model, so its hooks gather and reduce every parameter), and makes the reduce-scatter sum the
gradients instead of averaging them (the loss is already divided by the global token count).
`--dtype bfloat16` is FSDP2's `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`: the
sharded parameters (AdamW's master weights), their gradients and AdamW's state stay fp32, the
gathered parameters and the compute are bf16, the gradients are reduced in fp32.
`--cpu-offload` is its `CPUOffloadPolicy`: the sharded parameters, gradients and AdamW state live
in CPU memory and each layer's are copied to the device for its forward and backward.

How the ranks start and join is `rltap.train.launcher`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from rltap.config.train import PrecisionConfig
from rltap.record.errors import RltapError
from rltap.record.pack import TreePack

__all__ = ["Ranks", "decoder_layers", "shard_model"]

M = TypeVar("M", bound=torch.nn.Module)


@dataclass(frozen=True, slots=True)
class Ranks:
    """This process's place among the trainer ranks: `rank` of `world`, and whether a process
    group joins them (`group`; world 1 needs none). `current()` reads the initialized process
    group, if any."""

    rank: int = 0
    world: int = 1
    group: bool = False

    @property
    def sharded(self) -> bool:
        """Whether the trainer's model is sharded (FSDP2): over a process group, even one of a
        single rank (a launcher's: on one GPU FSDP2 still casts to bf16 and offloads)."""
        return self.group or self.world > 1

    @classmethod
    def current(cls) -> Ranks:
        """The default process group's rank and size, or rank 0 of 1 without one."""
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), group=True)
        return cls()

    def deal(self, pieces: Sequence[TreePack]) -> list[TreePack]:
        """This rank's share of `pieces`, by token count: largest first, each to the rank with
        the fewest tokens so far (the lowest on a tie); in their input order within a rank."""
        load = [0] * self.world
        owner = [0] * len(pieces)
        for index in sorted(range(len(pieces)), key=lambda i: -len(pieces[i])):
            rank = min(range(self.world), key=lambda r: (load[r], r))
            owner[index] = rank
            load[rank] += len(pieces[index])
        return [piece for piece, rank in zip(pieces, owner, strict=True) if rank == self.rank]

    def all_sum(self, values: Sequence[float]) -> list[float]:
        """`values` summed over the ranks, element-wise (in float64)."""
        return self._reduce(values, dist.ReduceOp.SUM)

    def all_max(self, values: Sequence[int]) -> list[int]:
        """`values`' maximum over the ranks, element-wise."""
        return [int(v) for v in self._reduce(values, dist.ReduceOp.MAX)]

    def _reduce(self, values: Sequence[float], op: Any) -> list[float]:
        if self.world == 1:
            return [float(v) for v in values]
        tensor = torch.tensor(list(values), dtype=torch.float64, device=_device())
        dist.all_reduce(tensor, op=op)
        return [float(v) for v in tensor.cpu()]


def _device() -> torch.device:
    """Where collectives' tensors live: the rank's GPU under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: its modules of the classes transformers names in
    `_no_split_modules` (of the outermost module naming any: a peft model's is its base
    model's; a `TokenScorer`'s its model's), outermost first."""
    found: Any = None
    for module in model.modules():
        found = getattr(module, "_no_split_modules", None)
        if found:
            break
    names = set(found or ())
    layers = [module for module in model.modules() if type(module).__name__ in names]
    if not layers:
        msg = f"{type(model).__name__} names no decoder layer class (_no_split_modules)"
        raise RltapError(msg)
    return layers


def shard_model(model: M, ranks: Ranks, precision: PrecisionConfig | None = None) -> M:
    """`model` sharded over the default process group with FSDP2: each decoder layer, then the
    root, every gradient summed over the ranks (not averaged), after `precision`'s dtype and
    offload; `model` itself without a process group. `model` is the module whose forward the
    trainer calls (its `TokenScorer`): a submodule called from outside the root's forward would
    run without FSDP2's gathers and gradient reduction."""
    if not ranks.sharded:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        FSDPModule,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    precision = precision or PrecisionConfig()
    device = next(model.parameters()).device
    mesh = init_device_mesh(device.type, (ranks.world,))
    mixed = MixedPrecisionPolicy()
    if precision.dtype == "bfloat16":
        mixed = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    # pinned memory needs an accelerator: on a CPU-only torch pinning raises
    offload = CPUOffloadPolicy(pin_memory=device.type == "cuda")
    policy: Any = offload if precision.cpu_offload else OffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=mixed, offload_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=mixed, offload_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no PREMUL_SUM)
    return model
