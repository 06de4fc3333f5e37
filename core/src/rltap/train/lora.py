"""LoRA training (`rltap train --lora-rank N`): the trainer's model as a peft model.

`lora_model(model, settings, base)` wraps a freshly loaded base model with a new adapter
(`peft.get_peft_model`), or with the adapter of a checkpoint when resuming
(`peft.PeftModel.from_pretrained(..., is_trainable=True)`). Only the adapter's parameters
require gradients, so `PolicyTrainer`'s AdamW holds only them; its KL reference is the same
model with the adapter disabled (`PeftModel.disable_adapter()`), no second copy.

The adapter: rank `--lora-rank`, alpha `--lora-alpha` (default twice the rank),
`--lora-target-modules` (default peft's `all-linear`), no dropout (the engine generates
without it, and the trainer must score the tokens with the same function) and no bias or extra
trained module, so that the adapter's tensors are all an engine needs
(`rltap.engines.lora`). The adapter records `base`, resolved, as its base model: a
checkpoint `RUN/step-N/` is peft's adapter folder, which transformers' `from_pretrained`
(and so `rltap eval --model RUN/step-N`, `rltap rollout --model ...`) loads with that base
model, and which vLLM serves with `--enable-lora --lora-modules NAME=RUN/step-N`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rltap._lazy import require_module
from rltap.config.train import LoraConfig
from rltap.engines.lora import LORA_EXTRA

__all__ = [
    "ADAPTER_CONFIG",
    "LoraMismatch",
    "adapter_config",
    "is_adapter_folder",
    "lora_model",
    "resolved_base",
    "trainable",
]

# peft's file in an adapter folder (next to adapter_model.safetensors).
ADAPTER_CONFIG = "adapter_config.json"


class LoraMismatch(ValueError):
    """A checkpoint's adapter (or its absence) does not match the run's --lora-rank."""


def is_adapter_folder(path: Path) -> bool:
    """Whether `path` holds a peft adapter (a LoRA run's checkpoint), not a whole model."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def lora_model(
    model: Any, settings: LoraConfig, *, base: str, checkpoint: Path | None = None
) -> Any:
    """`model` (the base model, loaded) with a trainable LoRA adapter: a new one after
    `settings`, or `checkpoint`'s (which must have been trained with the same rank)."""
    peft = require_module("peft", LORA_EXTRA, "rltap train --lora-rank")
    if checkpoint is not None:
        wrapped = peft.PeftModel.from_pretrained(model, str(checkpoint), is_trainable=True)
        rank = wrapped.peft_config[wrapped.active_adapter].r
        if rank != settings.lora_rank:
            msg = (
                f"{checkpoint} holds a rank-{rank} adapter; the run asks for --lora-rank "
                f"{settings.lora_rank}: resume with the same rank"
            )
            raise LoraMismatch(msg)
        return wrapped
    wrapped = peft.get_peft_model(model, adapter_config(settings))
    # get_peft_model records the name the model was loaded by, maybe a relative path.
    wrapped.peft_config[wrapped.active_adapter].base_model_name_or_path = resolved_base(base)
    return wrapped


def adapter_config(settings: LoraConfig) -> Any:
    """peft's `LoraConfig` of a new adapter after `settings` (rank, alpha, target modules; no
    dropout, bias or extra trained module)."""
    peft = require_module("peft", LORA_EXTRA, "rltap train --lora-rank")
    return peft.LoraConfig(
        r=settings.lora_rank,
        lora_alpha=settings.alpha,
        target_modules=settings.targets,
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )


def resolved_base(base: str) -> str:
    """The base model's name as an adapter records it: a folder's absolute path."""
    folder = Path(base)
    return str(folder.resolve()) if folder.exists() else base


def trainable(model: Any) -> list[Any]:
    """The parameters an update changes: all of them, or a LoRA model's adapter only."""
    return [parameter for parameter in model.parameters() if parameter.requires_grad]
