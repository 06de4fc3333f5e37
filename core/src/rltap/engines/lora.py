"""LoRA adapters on their way from a peft trainer into an engine, and into an embedded engine's
model.

The trainer's side: `adapter_of(model)` is a peft model's adapter as an `AdapterWeights` (its
resolved `LoraConfig` and only its `lora_` tensors), None for any other model, and
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
(`model.layers.0.self_attn.q_proj.lora_A.default.weight`) on both sides.

This module imports neither torch nor peft: `adapter_of` recognises a peft model without
importing peft (a process that never imported peft holds none); peft is imported where an
adapter is injected.
"""

from __future__ import annotations

import asyncio
import functools
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


def adapter_of(model: Any) -> AdapterWeights | None:
    """A peft model's active adapter as an engine in this process takes it (tensors detached,
    on the model's device), or None when `model` is not a peft model."""
    if not is_peft_model(model):
        return None
    config = model.peft_config[model.active_adapter]
    tensors = {
        name: tensor.detach()
        for name, tensor in model.get_base_model().state_dict().items()
        if LORA_TENSOR in name
    }
    return AdapterWeights(config=config, tensors=tensors)


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
