"""A sharded model's weights, whole on rank 0, one tensor at a time: its Hugging Face folder, its
LoRA adapter, and the trainer's AdamW state as torch.distributed.checkpoint (DCP) shards.

Every function here is a collective: every trainer rank calls it, in the same order (the
followers as `rltap.train.leader` tells them). At world size 1 they run on the model as it is.

Weights reach rank 0 tensor by tensor (`DTensor.full_tensor`, in the model's state-dict order)
and are written in safetensors shards of at most `CHUNK_BYTES` (a tensor larger than that is a
shard of its own): besides the model's own shard, rank 0 holds at most one chunk of gathered
weights at a time, so the peak is bounded by `max(CHUNK_BYTES, largest tensor)` whatever the
model's size (1 GiB by default; Qwen2.5-7B's largest tensor, its 152k x 3584 embedding, is 2.2 GB
in fp32). The folder is what `save_pretrained` writes (`config.json`, `generation_config.json`,
`model-*.safetensors` and their index), so transformers, `rltap serve`, `rltap eval` and vLLM
load it; tied weights (an output layer that is the input embedding) are written once, as
`save_pretrained` does.

The optimizer's state is saved sharded, each rank writing its own part
(`dcp.save` of `get_optimizer_state_dict`), and loads at any world size (`dcp.load` reshards):
a run saved on 2 ranks resumes on 1 and one saved on 1 resumes on 2. Only its own part of the
state ever is in a rank's memory.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from rltap.engines.base import AdapterWeights, NamedTensors, TensorSpec
from rltap.engines.lora import LORA_TENSOR
from rltap.train.distributed import Ranks

__all__ = [
    "CHUNK_BYTES",
    "INDEX",
    "adapter_weights",
    "full_state_dict",
    "load_optimizer_state",
    "named_tensors",
    "save_adapter",
    "save_model",
    "save_optimizer_state",
]

CHUNK_BYTES = 1 << 30
# transformers' name for the map from each tensor to its shard.
INDEX = "model.safetensors.index.json"


def _unique(model: torch.nn.Module, keep: Callable[[str], bool]) -> Iterator[tuple[str, Any]]:
    """`model`'s state dict (its sharded tensors as they are) that `keep` keeps, in order; a
    tensor tied to an earlier one is left out."""
    seen: set[int] = set()
    for name, value in model.state_dict(keep_vars=True).items():
        if id(value) in seen or not keep(name):
            continue
        seen.add(id(value))
        yield name, value


def gathered(
    model: torch.nn.Module, keep: Callable[[str], bool], *, to_cpu: bool = True
) -> Iterator[tuple[str, Any]]:
    """Each tensor of `model`'s state dict that `keep` keeps, whole and on the CPU on rank 0
    (None on the others), one at a time; a tensor tied to an earlier one is left out.
    `to_cpu=False` leaves each where its gather put it (the trainer's device), uncopied when
    the model is not sharded."""
    from torch.distributed.tensor import DTensor

    rank0 = Ranks.current().rank == 0
    for name, value in _unique(model, keep):
        whole = value.full_tensor() if isinstance(value, DTensor) else value
        if not rank0:
            yield name, None
        elif to_cpu:
            yield name, whole.detach().to("cpu", copy=True).contiguous()
        else:
            yield name, whole.detach()


def named_tensors(model: torch.nn.Module) -> NamedTensors:
    """`model`'s weights (sharded or not) as an engine that receives tensors takes them: each
    tensor's name, dtype and whole shape up front, then one pass of `gathered` per
    `tensors()` call (a collective on a sharded model: every rank must iterate it)."""
    specs = tuple(
        TensorSpec(name, value.dtype, tuple(value.shape)) for name, value in _unique(model, _all)
    )
    return NamedTensors(specs, lambda: gathered(model, _all, to_cpu=False))


def _all(name: str) -> bool:
    return True


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`model`'s whole state dict on rank 0's CPU, every key (a tied one the very tensor it is
    tied to), `{}` on the other ranks; `model.state_dict()` itself when it is not sharded. It
    holds the whole model at once: for tests and small models (`save_model` keeps one chunk)."""
    if not Ranks.current().sharded:
        return model.state_dict()
    state = model.state_dict(keep_vars=True)
    first = {id(value): name for name, value in reversed(state.items())}
    tensors = dict(gathered(model, lambda _: True))
    if Ranks.current().rank != 0:
        return {}
    return {name: tensors[first[id(value)]] for name, value in state.items()}


def save_model(model: Any, folder: Path, chunk_bytes: int = CHUNK_BYTES) -> None:
    """Write `model` (a Hugging Face causal LM, sharded or not) into `folder` as
    `save_pretrained` would, from rank 0, gathering at most `chunk_bytes` at a time; a previous
    save's shards there are replaced."""
    from safetensors.torch import save_file

    folder = Path(folder)
    rank0 = Ranks.current().rank == 0
    if rank0:
        folder.mkdir(parents=True, exist_ok=True)
        for old in [*folder.glob("*.safetensors"), folder / INDEX]:
            old.unlink(missing_ok=True)
    shards: list[list[str]] = []
    chunk: dict[str, torch.Tensor] = {}
    size = total = 0

    def flush() -> None:
        nonlocal chunk, size
        if chunk:
            save_file(chunk, str(folder / f".shard-{len(shards)}"), metadata={"format": "pt"})
            shards.append(list(chunk))
            chunk, size = {}, 0

    for name, tensor in gathered(model, lambda _: True):
        if tensor is None:
            continue
        nbytes = tensor.numel() * tensor.element_size()
        if size + nbytes > chunk_bytes:
            flush()
        chunk[name] = tensor
        size += nbytes
        total += nbytes
    flush()
    if not rank0:
        return
    weight_map = {}
    for number, names in enumerate(shards, 1):
        file = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        (folder / f".shard-{number - 1}").rename(folder / file)
        weight_map.update(dict.fromkeys(names, file))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True), encoding="utf-8")
    model.config.save_pretrained(str(folder))
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(str(folder))


def _adapter_tensors(model: Any) -> dict[str, torch.Tensor]:
    """A peft model's adapter tensors on rank 0, named as in the peft model's state dict."""
    return {
        name: tensor
        for name, tensor in gathered(model, lambda name: LORA_TENSOR in name)
        if tensor is not None
    }


def adapter_weights(model: Any) -> AdapterWeights | None:
    """A sharded peft model's adapter as an engine in this process takes it (named as in its
    base model, as `rltap.engines.lora.adapter_of` names them), on rank 0; None elsewhere."""
    tensors = _adapter_tensors(model)
    if Ranks.current().rank != 0:
        return None
    base_names = {
        id(value): name for name, value in model.get_base_model().state_dict(keep_vars=True).items()
    }
    named = {id(value): name for name, value in model.state_dict(keep_vars=True).items()}
    by_name = {name: base_names[key] for key, name in named.items() if key in base_names}
    config = model.peft_config[model.active_adapter]
    return AdapterWeights(config=config, tensors={by_name[k]: v for k, v in tensors.items()})


def save_adapter(model: Any, folder: Path) -> None:
    """Write a sharded peft model's adapter folder (peft's `save_pretrained` of the gathered
    adapter) into `folder`, from rank 0."""
    tensors = _adapter_tensors(model)
    if Ranks.current().rank == 0:
        Path(folder).mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(folder), state_dict=tensors)


def save_optimizer_state(model: torch.nn.Module, optimizer: Any, folder: Path) -> None:
    """`optimizer`'s state into `folder` as DCP shards, each rank its own part."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    from torch.distributed.checkpoint.state_dict_saver import save

    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    with _single_process_ok():
        save(state, checkpoint_id=str(folder), no_dist=_alone())


def load_optimizer_state(model: torch.nn.Module, optimizer: Any, folder: Path) -> None:
    """Load `folder`'s DCP optimizer state into `optimizer` (over `model`'s parameters, at any
    world size: each rank reads its own part)."""
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )
    from torch.distributed.checkpoint.state_dict_loader import load

    state = {"optimizer": get_optimizer_state_dict(model, optimizer)}
    with _single_process_ok():
        load(state, checkpoint_id=str(folder), no_dist=_alone())
    set_optimizer_state_dict(model, optimizer, optim_state_dict=state["optimizer"])


def _alone() -> bool:
    """Whether this process runs without a process group (DCP then reads and writes alone)."""
    return not Ranks.current().group


@contextlib.contextmanager
def _single_process_ok() -> Iterator[None]:
    """DCP warns whenever it runs without a process group; at world size 1 that is intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        yield
