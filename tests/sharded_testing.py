"""The rank programs of tests/train/test_sharded_checkpoints.py and test_sharded_sync.py
(importable by name: the launcher spawns the ranks). A checkpoint is what `rltap train` writes:
the Hugging Face folder (or adapter folder) from `RankLeader.save_model`'s gather and AdamW's
state as DCP shards.

`save_after_one_step` trains the tiny model one step on `fixed_packs()` at this world size and
writes the checkpoint into OUT/checkpoint; `resume_one_step` loads it at this world size, trains
step 2 and writes the whole state dict from rank 0 (`OUT/resumed.pt`).

`push_from_shards` trains one step at this world size, then rank 0 pushes the weights (as
`rltap train` does: `RankLeader.weights()` through `weight_sync`) into a fake vLLM server, a fake
SGLang server and an embedded engine with a copy of its own; it writes what they got.

`transfer_from_shards` trains one step likewise, then rank 0 streams the weights into a fake vLLM
server with vLLM's weight-transfer routes (each tensor gathered as it is sent): a first push that
the server fails after its first chunk, then one that goes through; it writes what the server
holds (`OUT/transferred.pt`) and the trained weights (`OUT/trained.pt`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import torch
from distributed_testing import MICRO_BATCH_TOKENS, fixed_packs
from transformers import AutoModelForCausalLM
from weight_testing import VLLM_DEV_ROUTES, ReloadServer

from rltap.config import LoraConfig, UpdateConfig
from rltap.engines.sglang import SGLangEngine
from rltap.engines.transformers import TransformersEngine
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import EngineError
from rltap.testing.fakes.vllm_transfer import FakeTransferVLLM
from rltap.train.gather import (
    CHUNK_BYTES,
    full_state_dict,
    load_optimizer_state,
    save_adapter,
    save_model,
    save_optimizer_state,
)
from rltap.train.launcher import process_group
from rltap.train.leader import RankLeader, follow
from rltap.train.lora import lora_model
from rltap.train.sync import weight_sync
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


async def _pushes(leader: RankLeader, model_dir: str, out: Path) -> dict[str, Any]:
    vllm_folder, sglang_folder = out / "vllm", out / "sglang"
    sglang_reply = {"success": True, "message": "ok", "num_paused_requests": 0}
    async with (
        ReloadServer(dict(VLLM_DEV_ROUTES)) as vllm_server,
        ReloadServer({"/update_weights_from_disk": (200, sglang_reply)}) as sglang_server,
    ):
        vllm_server.folder = vllm_folder
        vllm = VLLMEngine(vllm_server.url, model="tiny")
        await weight_sync(vllm, vllm_folder).push(leader.weights(), 5)
        sglang = SGLangEngine(sglang_server.url)
        await weight_sync(sglang, sglang_folder).push(leader.weights(), 6)
    copy = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    embedded = TransformersEngine(copy, tokenizer=model_dir, num_threads=1)
    try:
        await weight_sync(embedded, out / "unused").push(leader.weights(), 7)
    finally:
        await embedded.close()
    torch.save(copy.state_dict(), out / "embedded.pt")
    return {
        "versions": [vllm.version, sglang.version, embedded.version],
        "vllm": vllm_server.paths(),
        "vllm_files": sorted(vllm_server.files_seen[1]),
        "sglang": sglang_server.requests[0][3],
    }


def push_from_shards(model_dir: str, out: str) -> dict[str, Any] | None:
    return _after_one_step(model_dir, out, lambda leader: _pushes(leader, model_dir, Path(out)))


def transfer_from_shards(model_dir: str, out: str) -> dict[str, Any] | None:
    return _after_one_step(model_dir, out, lambda leader: _transfers(leader, Path(out)))


def _after_one_step(
    model_dir: str, out: str, lead: Callable[[RankLeader], Coroutine[Any, Any, dict[str, Any]]]
) -> dict[str, Any] | None:
    """One step at this world size; then rank 0 runs `lead` (what it returns comes back) while
    the others follow; rank 0 writes the trained weights (`OUT/trained.pt`)."""
    torch.set_num_threads(1)
    with process_group() as ranks:
        torch.manual_seed(0)
        trainer = PolicyTrainer(_model(model_dir, 0, None), UPDATE)
        trainer.step(fixed_packs(), version=0)
        seen = None
        if ranks.rank == 0:
            leader = RankLeader(trainer, ranks)
            try:
                seen = asyncio.run(lead(leader))
            finally:
                leader.stop()
        else:
            follow(trainer)
        weights = full_state_dict(trainer.model)
        if ranks.rank == 0:
            torch.save(weights, Path(out) / "trained.pt")
        return seen


async def _transfers(leader: RankLeader, out: Path) -> dict[str, Any]:
    async with FakeTransferVLLM() as server:
        engine = VLLMEngine(server.url, transfer=server.transfer(1 << 16))
        sync = weight_sync(engine, out / "unused")
        server.fail["update_weights"] = 1
        try:
            await sync.push(leader.weights(), 1)
            failed = ""
        except EngineError as exc:  # the other ranks must still be in step for the next push
            failed = exc.message
        await sync.push(leader.weights(), 2)
        await engine.close()
    torch.save(server.weights, out / "transferred.pt")
    return {"failed": failed, "version": engine.version, "chunks": len(server.chunks)}
