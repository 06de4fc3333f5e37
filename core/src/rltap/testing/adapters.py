"""Random LoRA adapters for tests and benchmarks of adapter serving: a trained adapter's B is
not zero, so a fresh peft adapter (B = 0, the base model exactly) shows nothing."""

from __future__ import annotations

import copy
from typing import Any

from rltap._lazy import require_module
from rltap.engines.base import AdapterWeights
from rltap.engines.lora import LORA_EXTRA

__all__ = ["LINEAR_TARGETS", "random_adapter"]

# Every linear layer of a Llama/Qwen2 decoder block.
LINEAR_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def random_adapter(
    model: Any, name: str, seed: int, *, rank: int = 4, scale: float = 0.05
) -> AdapterWeights:
    """A rank-`rank` adapter `name` on every linear layer of `model` (alpha 2 x rank), every
    tensor drawn from N(0, scale^2) with `seed`, named as peft names adapter `name`'s tensors.
    On the tiny test model keep `scale` at 0.05 or below: larger amplifies a batch's float
    summation order past 1e-5."""
    import torch

    peft = require_module("peft", LORA_EXTRA, "random LoRA adapters")
    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=LINEAR_TARGETS)
    scratch = peft.inject_adapter_in_model(config, copy.deepcopy(model), adapter_name=name)
    generator = torch.Generator().manual_seed(seed)
    tensors = {
        key: torch.randn(value.shape, generator=generator) * scale
        for key, value in scratch.state_dict().items()
        if ".lora_" in key
    }
    return AdapterWeights(config, tensors, name=name)
