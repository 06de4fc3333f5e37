"""LoRA adapters on their way from a peft trainer into an engine, and into an embedded engine's
model.

The trainer's side: `adapter_of(model)` is a peft model's adapter as an `AdapterWeights` (its
resolved `LoraConfig` and only its `lora_` tensors; `adapter_of(model, name)` the adapter
`name` of a peft model holding several, one per policy), None for any other model, and
`adapter_folder(model, folder, version)` the `WeightFolder` a server engine loads it from
(`folder/adapter-v<version>/`, peft's `save_pretrained`: a folder per version, as a server may
read an adapter again while its requests run; the ones older than `ADAPTER_FOLDERS_KEPT`
versions are removed), so the weight sync (`rltap.train.sync`, `rltap.rollout.ray.weights`)
moves the adapter alone.

The embedded engines' side (`rltap.engines._hf`): `weight_loader(source)` is how an engine
loads any `WeightSource` into its model on the worker thread. For `AdapterWeights` it is
`load_adapter`: the first time, peft's `inject_adapter_in_model` gives the engine's own model
the same adapter layers (the base weights stay where they are; the model's class and forward
are unchanged, so the decode loop and its KV cache work as before), then the adapter's tensors
are copied in place, every one of the engine's adapter tensors being required. The names are
those of the base model with the adapter injected
(`model.layers.0.self_attn.q_proj.lora_A.default.weight`) on both sides. An adapter named
after a policy (`AdapterWeights.name`) is injected under that name beside the others, its
tensors named with it (`...lora_A.tutor.weight`); the engine routes each request to its
policy's adapter (`rltap.engines._adapters`).

This module imports neither torch nor peft: `adapter_of` recognises a peft model without
importing peft (a process that never imported peft holds none); peft is imported where an
adapter is injected.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from rltap.engines.base import AdapterWeights, WeightFolder

__all__ = [
    "ADAPTER_FOLDERS_KEPT",
    "LORA_EXTRA",
    "LORA_TENSOR",
    "adapter_folder",
    "adapter_of",
    "adapter_of_tensor",
    "is_peft_model",
]

# The extra of rltap that installs peft (`rltap train --lora-rank`).
LORA_EXTRA = "rltap[train]"
# Versions whose adapter folders stay: the new one and those a server may still serve.
ADAPTER_FOLDERS_KEPT = 3
_ADAPTER_FOLDER = re.compile(r"adapter-v(\d+)")
# Every adapter tensor's name holds it (lora_A, lora_B, lora_embedding_A, lora_magnitude_vector).
LORA_TENSOR = ".lora_"


def is_peft_model(model: Any) -> bool:
    """Whether `model` is a peft `PeftModel` (without importing peft: none exists before)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def adapter_of_tensor(name: str) -> str | None:
    """The adapter a LoRA tensor belongs to (peft names it after the `lora_*` part:
    `...q_proj.lora_A.<adapter>.weight`), None for a tensor of no adapter."""
    parts = name.split(".")
    for part, following in itertools.pairwise(parts):
        if part.startswith("lora_"):
            return following
    return None


def adapter_of(model: Any, name: str | None = None) -> AdapterWeights | None:
    """A peft model's adapter `name` (default: its active adapter) as an engine in this process
    takes it (that adapter's tensors, detached, on the model's device), or None when `model` is
    not a peft model."""
    if not is_peft_model(model):
        return None
    adapter = model.active_adapter if name is None else name
    config = model.peft_config[adapter]
    tensors = {
        key: tensor.detach()
        for key, tensor in model.get_base_model().state_dict().items()
        if LORA_TENSOR in key and adapter_of_tensor(key) == adapter
    }
    return AdapterWeights(config=config, tensors=tensors, name=adapter)


def adapter_folder(model: Any, folder: Path, version: int) -> WeightFolder:
    """The `WeightFolder` of peft model `model`'s adapter at `version`: written, when the
    engine asks, into `folder/adapter-v<version>/`, after removing the folders of versions
    `ADAPTER_FOLDERS_KEPT` or more before it."""
    path = Path(folder) / f"adapter-v{version}"
    return WeightFolder(path, save=functools.partial(_save_adapter, model, version), adapter=True)


async def _save_adapter(model: Any, version: int, path: Path) -> None:
    def write() -> None:
        for old in path.parent.iterdir() if path.parent.is_dir() else ():
            match = _ADAPTER_FOLDER.fullmatch(old.name)
            if match and int(match.group(1)) <= version - ADAPTER_FOLDERS_KEPT:
                shutil.rmtree(old, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(path))

    await asyncio.to_thread(write)
