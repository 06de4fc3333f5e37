"""LoRA training (`rltap train --lora-rank`, rltap.train.lora): a step changes only the adapter
(every base weight bit-identical), AdamW holds only the adapter's parameters, the KL reference
is the base model (adapter disabled), the weight sync hands an embedded engine only the
adapter's tensors, after which the engine generates the trainer model's greedy tokens with its
logprobs (within 1e-5), and a checkpoint is peft's adapter folder, which resumes the trainer
and which `from_pretrained` loads as base + adapter."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
from weight_testing import max_logprob_diff

from rltap.config import LoraConfig, UpdateConfig
from rltap.engines.base import AdapterWeights
from rltap.engines.scripted import ScriptedEngine
from rltap.engines.transformers import TransformersEngine
from rltap.record.errors import EngineError
from rltap.record.pack import TreePack, pack_interactions
from rltap.record.types import ModelRequest
from rltap.testing.packs import recorded_call as call
from rltap.train.gather import load_optimizer_state, save_optimizer_state
from rltap.train.lora import is_adapter_folder, lora_model
from rltap.train.run_dir import RunDir
from rltap.train.sync import weight_source, weight_sync
from rltap.train.trainer import PolicyTrainer

PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


def tree(seed: int = 0) -> TreePack:
    """A prompt sampled twice, the first continued, with distinct rewards and behaviour
    logprobs unlike the model's."""
    first = call([1, 2, 3, 4], [10, 11, 12])
    second = call([1, 2, 3, 4], [20, 21])
    third = call([5, 6], [30, 31, 32], first)
    calls = [first, second, third]
    rewards = dict(zip((c.interaction_id for c in calls), (0.5, -1.0, 2.0), strict=True))
    pack = pack_interactions(calls, rewards)
    generated = pack.loss_mask == 1
    pack.logprobs[generated] = -np.random.default_rng(seed).uniform(5.0, 15.0, generated.sum())
    return pack


def lora(tiny_model_dir: Path, rank: int = 4, targets: str = "all-linear") -> Any:
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float32")
    settings = LoraConfig(lora_rank=rank, lora_target_modules=targets)
    return lora_model(base, settings, base=str(tiny_model_dir))


def trained(model: Any, steps: int = 2, kl_coef: float = 0.0) -> PolicyTrainer:
    trainer = PolicyTrainer(model, UpdateConfig(lr=1e-2, kl_coef=kl_coef))
    for step in range(steps):
        trainer.step([tree(0), tree(1)], version=step)
    return trainer


def base_weights(model: Any) -> dict[str, torch.Tensor]:
    return {
        name: tensor.clone()
        for name, tensor in model.get_base_model().state_dict().items()
        if ".lora_" not in name
    }


def test_a_lora_step_changes_only_the_adapter(tiny_model_dir: Path) -> None:
    model = lora(tiny_model_dir)
    before = base_weights(model)
    adapter_before = {k: v.clone() for k, v in model.state_dict().items() if ".lora_" in k}
    trainer = trained(model)
    optimised = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    named = dict(model.named_parameters())
    assert optimised == {id(p) for n, p in named.items() if ".lora_" in n}
    # 2 layers x 7 linear layers x (A, B); the base model's own weights are not optimised.
    assert len(optimised) == 28 < len(named)
    after = base_weights(model)
    assert after.keys() == before.keys()
    assert all(torch.equal(after[name], before[name]) for name in before)
    moved = [k for k, v in model.state_dict().items() if ".lora_" in k]
    assert all(not torch.equal(model.state_dict()[k], adapter_before[k]) for k in moved)


def logits(model: Any) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0]


def greedy(model: Any, n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([PROMPT]), max_new_tokens=n, do_sample=False, eos_token_id=None
        )
    return [int(t) for t in out[0, len(PROMPT) :]]


def test_the_kl_reference_of_a_lora_model_is_its_base_model(
    tiny_model_dir: Path, tiny_model: Any
) -> None:
    model = lora(tiny_model_dir)
    trainer = trained(model, steps=1, kl_coef=0.1)
    assert trainer.reference is None  # no second copy of the model
    assert trainer.step([tree(0)], version=1)["kl"] > 1e-6  # the adapter moved the policy
    with model.disable_adapter():
        assert torch.equal(logits(model), logits(tiny_model))
    assert float((logits(model) - logits(tiny_model)).abs().max()) > 1e-3


async def test_the_sync_moves_only_the_adapter_and_the_engine_serves_it(
    tiny_model_dir: Path, tiny_model: Any
) -> None:
    model = lora(tiny_model_dir)
    trained(model)
    source = weight_source(model, state_dict=True, folder=Path("unused"))
    assert isinstance(source, AdapterWeights)
    assert source.tensors
    assert all(".lora_" in name for name in source.tensors)
    adapter_size = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert sum(t.numel() for t in source.tensors.values()) == adapter_size
    engine = TransformersEngine(copy.deepcopy(tiny_model), eos_token_ids=[])
    sync = weight_sync(engine, Path("unused"))
    replies = []
    try:
        for version in (3, 4):  # the second push copies into the layers the first injected
            await sync.push(model, version)
            request = ModelRequest(input_ids=PROMPT, max_new_tokens=10, temperature=0.0)
            reply = await engine.generate(request)
            replies.append((reply, greedy(model, 10), max_logprob_diff(model, reply)))
            trained(model, steps=1)
    finally:
        await engine.close()
    for version, (reply, expected, gap) in zip((3, 4), replies, strict=True):
        assert reply.output_versions == [version] * 10
        assert reply.output_tokens == expected  # the trainer's peft model's greedy tokens
        assert gap <= 1e-5
    assert replies[0][0].output_tokens != greedy(tiny_model, 10)  # not the base model's


async def test_the_engine_serves_the_trainers_logprobs_within_1e_5(
    tiny_model_dir: Path, tiny_model: Any
) -> None:
    model = lora(tiny_model_dir, rank=8)
    trained(model)
    engine = TransformersEngine(copy.deepcopy(tiny_model), eos_token_ids=[])
    scripted = ScriptedEngine(lambda messages, tools, turn: "hi", tiny_model_dir)
    try:
        await weight_sync(engine, Path("unused")).push(model, 1)
        request = ModelRequest(input_ids=PROMPT, max_new_tokens=12, temperature=1.0, seed=4)
        sampled = await engine.generate(request)
        await weight_sync(scripted, Path("unused")).push(model, 1)  # the scripted engine too
        scored = await scripted.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=8))
    finally:
        await engine.close()
        await scripted.close()
    assert max_logprob_diff(model, sampled) <= 1e-5
    assert max_logprob_diff(tiny_model, sampled) > 1e-3
    assert scored.output_versions == [1] * scored.output_len
    assert max_logprob_diff(model, scored) <= 1e-5


async def test_an_adapter_of_other_target_modules_is_refused(
    tiny_model_dir: Path, tiny_model: Any
) -> None:
    engine = TransformersEngine(copy.deepcopy(tiny_model), eos_token_ids=[])
    try:
        await weight_sync(engine, Path("unused")).push(lora(tiny_model_dir), 1)
        narrower = lora(tiny_model_dir, targets="q_proj,v_proj")
        with pytest.raises(EngineError, match="lacks 20 of the engine's 28 adapter tensors"):
            await weight_sync(engine, Path("unused")).push(narrower, 2)
        wider_rank = lora(tiny_model_dir, rank=8)
        with pytest.raises(EngineError, match="cannot load weights"):
            await weight_sync(engine, Path("unused")).push(wider_rank, 2)
    finally:
        await engine.close()
    assert engine.version == 1


def test_a_checkpoint_is_the_adapter_and_resumes_the_trainer(
    tiny_model_dir: Path, tiny_model: Any, qwen_tokenizer: Any, tmp_path: Path
) -> None:
    model = lora(tiny_model_dir)
    trainer = trained(model)
    run = RunDir(tmp_path / "run")
    saver = functools.partial(save_optimizer_state, model, trainer.optimizer)
    checkpoint = run.save_checkpoint(2, model, qwen_tokenizer, saver, {"step": 2})
    run.close()
    files = {p.name for p in checkpoint.path.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "generation_config.json"} <= files
    assert "model.safetensors" not in files
    assert is_adapter_folder(checkpoint.path)

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float32")
    settings = LoraConfig(lora_rank=4)
    resumed = lora_model(base, settings, base=str(tiny_model_dir), checkpoint=checkpoint.path)
    again = PolicyTrainer(resumed, UpdateConfig(lr=1e-2))
    load_optimizer_state(resumed, again.optimizer, checkpoint.optimizer_path)
    assert torch.equal(logits(resumed), logits(model))
    # The same next step from the checkpoint as from the trainer that saved it.
    trainer.step([tree(2)], version=2)
    again.step([tree(2)], version=2)
    assert float((logits(resumed) - logits(model)).abs().max()) <= 1e-6
    # transformers loads the folder as base model + adapter (`rltap eval --model RUN/step-N`).
    loaded = AutoModelForCausalLM.from_pretrained(str(checkpoint.path), dtype="float32").eval()
    model.eval()
    with model.disable_adapter():
        assert torch.equal(logits(model), logits(tiny_model))
    assert float((logits(loaded) - logits(tiny_model)).abs().max()) > 1e-3
    fresh = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float32")
    with pytest.raises(ValueError, match="rank-4 adapter; the run asks for --lora-rank 8"):
        lora_model(fresh, LoraConfig(lora_rank=8), base="x", checkpoint=checkpoint.path)
