"""The rank programs of tests/train/test_sharded_checkpoints.py (importable by name: the
launcher spawns the ranks). A checkpoint is what `rltap train` writes: the Hugging Face folder
(or adapter folder) from `RankLeader.save_model`'s gather and AdamW's state as DCP shards.

`save_after_one_step` trains the tiny model one step on `fixed_packs()` at this world size and
writes the checkpoint into OUT/checkpoint; `resume_one_step` loads it at this world size, trains
step 2 and writes the whole state dict from rank 0 (`OUT/resumed.pt`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from distributed_testing import MICRO_BATCH_TOKENS, fixed_packs
from transformers import AutoModelForCausalLM

from rltap.config import LoraConfig, UpdateConfig
from rltap.train.distributed import full_state_dict
from rltap.train.gather import (
    CHUNK_BYTES,
    load_optimizer_state,
    save_adapter,
    save_model,
    save_optimizer_state,
)
from rltap.train.launcher import process_group
from rltap.train.lora import lora_model
from rltap.train.trainer import PolicyTrainer

UPDATE = UpdateConfig(lr=1e-2, algo="ppo", minibatches=1, micro_batch_tokens=MICRO_BATCH_TOKENS)


def _model(model_dir: str, lora_rank: int, checkpoint: Path | None) -> Any:
    if not lora_rank:
        return AutoModelForCausalLM.from_pretrained(str(checkpoint or model_dir), dtype="float32")
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    return lora_model(base, LoraConfig(lora_rank=lora_rank), base=model_dir, checkpoint=checkpoint)


def save_after_one_step(model_dir: str, out: str, lora_rank: int, chunk_bytes: int) -> None:
    torch.set_num_threads(1)
    with process_group():
        torch.manual_seed(0)
        trainer = PolicyTrainer(_model(model_dir, lora_rank, None), UPDATE)
        trainer.step(fixed_packs(), version=0)
        folder = Path(out) / "checkpoint"
        if lora_rank:
            save_adapter(trainer.model, folder)
        else:
            save_model(trainer.model, folder, chunk_bytes or CHUNK_BYTES)
        save_optimizer_state(trainer.model, trainer.optimizer, folder / "optimizer")


def resume_one_step(model_dir: str, out: str, lora_rank: int) -> None:
    torch.set_num_threads(1)
    with process_group() as ranks:
        torch.manual_seed(0)
        folder = Path(out) / "checkpoint"
        trainer = PolicyTrainer(_model(model_dir, lora_rank, folder), UPDATE)
        load_optimizer_state(trainer.model, trainer.optimizer, folder / "optimizer")
        trainer.step(fixed_packs(), version=1)
        weights = full_state_dict(trainer.model)
        if ranks.rank == 0:
            torch.save(weights, Path(out) / "resumed.pt")
