"""`rltap train`'s own proxy and engine, on one copy of the model where that is safe.

Without `--async`, rollouts and training take turns, so the embedded engine can generate with the
very module the trainer updates: the engine is built on `trainer.model` (`TransformersEngine` takes
a loaded model, sets it to eval mode and runs it under `torch.inference_mode`), so the process
holds one copy of the weights, not two (a LoRA run's engine runs the peft model's base model, which
holds the adapter's layers: nothing moves at a sync, not even the adapter). The training step then
runs with the engine `paused` (no decode step starts meanwhile, not even a late request's), and the
sync is only the version bump and the rebuild of the KV cache of any request in flight, which an
empty partial `update_weights` does. With `--async` the next rollouts decode while the trainer
updates, so the engine keeps a copy of its own that each sync copies into (`rltap.train.sync`); so
does an engine on another device than the trainer's, or any other engine kind.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rltap.config import RolloutConfig, TrainConfig
from rltap.config.serve import EngineConfig
from rltap.engines.lora import is_peft_model
from rltap.engines.transformers import TransformersEngine
from rltap.rollout.serving import Serving, local_workflow
from rltap.rollout.workflow import OpenAIProxyWorkflow
from rltap.store.schema import STORE_FILE
from rltap.train.distributed import Ranks
from rltap.train.sync import WeightSync, weight_sync

__all__ = [
    "Hold",
    "LocalTraining",
    "SharedModelSync",
    "generating_module",
    "local_training",
    "shares_model",
]

Hold = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


def shares_model(config: TrainConfig, model: torch.nn.Module) -> bool:
    """Whether the run's engine generates with the trainer's `model` itself: the embedded
    transformers engine, in this process (no --ray), on the model's device, without --async, and
    the model whole (one trainer rank: a sharded model holds only this rank's part), with one
    policy (with `[policies]` the engine holds each policy's adapter by name, loaded at syncs,
    where the trainer's model switches adapters per policy)."""
    engine = config.serve.engine
    if engine.engine != "transformers" or config.ray.ray is not None:
        return False
    if Ranks.current().sharded:
        return False
    if config.loop.async_rollouts:
        return False
    if config.policies:  # the engine routes each row to its policy's adapter: its own copy
        return False
    return next(model.parameters()).device == torch.device(engine.device)


def generating_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module an engine sharing `model` runs: the model, or a LoRA (peft) model's base model,
    which holds the adapter's layers (peft injects them in place) and keeps the model class's
    own forward (its cache keyword, which `PeftModel.forward` hides)."""
    return model.get_base_model() if is_peft_model(model) else model  # type: ignore[operator]


def shared_engine(
    config: EngineConfig, model: torch.nn.Module, tokenizer: Any = None
) -> TransformersEngine:
    """The embedded engine of `config` on the loaded `model` (not a copy of it), and on
    `tokenizer` when given (the config's, loaded)."""
    return TransformersEngine(
        generating_module(model),
        tokenizer=tokenizer if tokenizer is not None else config.tokenizer or config.model,
        num_threads=config.num_threads,
        device=config.device,
        max_prefill_tokens=config.max_prefill_tokens,
    )


class SharedModelSync:
    """The sync into an engine that generates with the trainer's model: the weights are already
    there, so a push stamps the new version and rebuilds the KV cache of requests in flight."""

    def __init__(self, engine: TransformersEngine) -> None:
        self.engine = engine

    async def push(self, model: torch.nn.Module, version: int) -> None:
        if generating_module(model) is not self.engine.model:
            msg = "this engine generates with the trainer's model: push that model"
            raise ValueError(msg)
        await self.engine.update_weights({}, version=version, partial=True)


@dataclass(frozen=True, slots=True)
class LocalTraining:
    """The proxy and agent workflow a run's episodes go to, its weight sync, and what each
    training step runs under (`exclusive()`: the engine paused where it shares the model)."""

    serving: Serving
    workflow: OpenAIProxyWorkflow
    sync: WeightSync
    exclusive: Hold


@contextlib.asynccontextmanager
async def local_training(
    config: TrainConfig, model: torch.nn.Module, sync_dir: Path, *, tokenizer: Any = None
) -> AsyncIterator[LocalTraining]:
    """This process's proxy and engine for `config`'s episodes (their sessions in the run
    folder's capture store), on `model` itself when `shares_model`. `tokenizer`, the run's
    tokenizer the caller loaded, is the proxy's renderer's too (and the shared engine's): one
    copy in the process, not three."""
    rollout: RolloutConfig = config.rollout()
    rollout = rollout.with_serve(rollout.serve.with_store(str(Path(rollout.out) / STORE_FILE)))
    if not shares_model(config, model):
        # A launched vLLM serves LoRA adapters up to the run's rank, one per policy.
        policies = config.policies or {}
        served = local_workflow(
            rollout,
            tokenizer=tokenizer,
            lora_rank=max((p.lora_rank for p in policies.values()), default=config.lora.lora_rank),
            max_loras=max(len(policies), 1),
        )
        async with served as (serving, workflow):
            sync = weight_sync(serving.engine, sync_dir)
            yield LocalTraining(serving, workflow, sync, contextlib.nullcontext)
        return
    engine = shared_engine(rollout.serve.engine, model, tokenizer)
    async with local_workflow(rollout, engine=engine, tokenizer=tokenizer) as (serving, workflow):
        yield LocalTraining(serving, workflow, SharedModelSync(engine), engine.paused)
