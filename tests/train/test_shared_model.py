"""One copy of the model in `rltap train` without --async (rltap.train.shared): the embedded
engine behind the run's proxy generates with the trainer's own module, the training step runs
with the engine paused, and a push only stamps the new version; after a real trainer step its
greedy tokens are those of an engine holding a copy that the state-dict sync updated. With
--async (or another engine kind, --ray, another device) the engine keeps a copy of its own. A
LoRA run's engine runs the peft model's base model, which holds the adapter."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rltap.config import EngineConfig, LoopConfig, RayConfig, ServeConfig, TrainConfig
from rltap.config.train import LoraConfig, UpdateConfig
from rltap.engines.transformers import TransformersEngine
from rltap.record.pack import pack_interactions
from rltap.record.types import ModelRequest
from rltap.testing.packs import recorded_call
from rltap.train.lora import lora_model
from rltap.train.shared import SharedModelSync, local_training, shares_model
from rltap.train.sync import weight_sync
from rltap.train.trainer import PolicyTrainer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_toy"
PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


def train_config(model_dir: Path, out: Path, **changes: Any) -> TrainConfig:
    engine = EngineConfig(model=str(model_dir), **changes.pop("engine", {}))
    return TrainConfig(
        agent=f"{EXAMPLE / 'agent.py'}:Agent",
        data=str(EXAMPLE / "data.jsonl"),
        out=str(out),
        serve=ServeConfig(engine=engine),
        **changes,
    )


def trainer_model(model_dir: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="float32")


def shares_storage(a: Any, b: Any) -> set[bool]:
    return {
        p.data_ptr() == q.data_ptr() for p, q in zip(a.parameters(), b.parameters(), strict=True)
    }


def a_training_step(trainer: PolicyTrainer) -> None:
    """One real AdamW step on two recorded samples of a prompt, rewards 1 and 0."""
    first, second = recorded_call([1, 2, 3, 4], [10, 11, 12]), recorded_call([1, 2, 3, 4], [20])
    rewards = {first.interaction_id: 1.0, second.interaction_id: 0.0}
    trainer.step([pack_interactions([first, second], rewards)], version=0)


def greedy(max_new_tokens: int = 12) -> ModelRequest:
    return ModelRequest(input_ids=PROMPT, max_new_tokens=max_new_tokens, temperature=0.0)


@pytest.mark.parametrize(
    ("changes", "shared"),
    [
        pytest.param({}, True, id="embedded-sync"),
        pytest.param({"loop": LoopConfig(async_rollouts=True)}, False, id="async"),
        pytest.param({"ray": RayConfig(ray="auto")}, False, id="ray"),
        pytest.param({"engine": {"device": "meta"}}, False, id="other-device"),
        pytest.param({"engine": {"engine": "scripted", "script": "m:f"}}, False, id="scripted"),
    ],
)
def test_only_an_embedded_engine_without_async_shares_the_trainer_model(
    tiny_model: Any, tmp_path: Path, changes: dict[str, Any], shared: bool
) -> None:
    config = train_config(Path("tiny"), tmp_path, **changes)
    assert shares_model(config, tiny_model) is shared


async def test_without_async_the_engine_generates_with_the_trainer_model(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = trainer_model(tiny_model_dir)
    trainer = PolicyTrainer(model, UpdateConfig(lr=1e-2))
    copied = TransformersEngine(str(tiny_model_dir))  # what a second copy does
    await copied.start()
    config = train_config(tiny_model_dir, tmp_path / "run")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))  # the run's, for checkpoints
    async with local_training(config, model, tmp_path / "sync", tokenizer=tokenizer) as local:
        engine = local.serving.engine
        assert isinstance(engine, TransformersEngine)
        assert engine.model is model
        before = await engine.generate(greedy())
        assert engine.tokenizer is tokenizer  # one copy of the tokenizer too
        assert before.output_tokens == (await copied.generate(greedy())).output_tokens

        async with local.exclusive():  # the loop's training step: no decode step meanwhile
            waiting = asyncio.ensure_future(engine.generate(greedy(4)))
            await asyncio.to_thread(a_training_step, trainer)
            await asyncio.sleep(0.2)
            assert not waiting.done()
        assert (await waiting).output_versions == [0] * 4  # it ran once the step was over
        assert shares_storage(engine.model, model) == {True}

        await local.sync.push(model, 1)
        await weight_sync(copied, tmp_path / "unused").push(model, 1)
        after, expected = await engine.generate(greedy()), await copied.generate(greedy())
        assert after.output_versions == [1] * after.output_len
        assert after.output_tokens == expected.output_tokens
        assert after.output_tokens != before.output_tokens  # the step changed the weights
        diff = torch.tensor(after.output_logprobs) - torch.tensor(expected.output_logprobs)
        assert float(diff.abs().max()) <= 1e-5
        with pytest.raises(ValueError, match="the trainer's model"):
            await local.sync.push(trainer_model(tiny_model_dir), 2)
        assert isinstance(local.sync, SharedModelSync)
    await copied.close()


async def test_with_async_the_engine_keeps_a_copy_that_a_push_updates(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = trainer_model(tiny_model_dir)
    trainer = PolicyTrainer(model, UpdateConfig(lr=1e-2))
    config = train_config(tiny_model_dir, tmp_path / "run", loop=LoopConfig(async_rollouts=True))
    async with local_training(config, model, tmp_path / "sync") as local:
        engine = local.serving.engine
        assert isinstance(engine, TransformersEngine)
        assert shares_storage(engine.model, model) == {False}
        async with local.exclusive():  # nothing to pause: rollouts go on while it trains
            assert (await engine.generate(greedy(4))).output_len == 4
        before = await engine.generate(greedy())
        a_training_step(trainer)
        assert (await engine.generate(greedy())).output_tokens == before.output_tokens
        await local.sync.push(model, 1)
        after = await engine.generate(greedy())
        assert after.output_versions == [1] * after.output_len
        assert after.output_tokens != before.output_tokens


async def test_a_lora_run_shares_the_base_model_that_holds_the_adapter(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    settings = LoraConfig(lora_rank=4)
    # A seeded adapter: whether one step flips a greedy token must not hang on the RNG state
    # the tests run before left behind.
    torch.manual_seed(0)
    model = lora_model(trainer_model(tiny_model_dir), settings, base=str(tiny_model_dir))
    trainer = PolicyTrainer(model, UpdateConfig(lr=5e-2))
    copied = TransformersEngine(str(tiny_model_dir))  # takes the adapter at each push
    await copied.start()
    config = train_config(tiny_model_dir, tmp_path / "run", lora=settings)
    async with local_training(config, model, tmp_path / "sync") as local:
        engine = local.serving.engine
        assert isinstance(engine, TransformersEngine)
        assert engine.model is model.get_base_model()  # the model class's own forward
        assert shares_storage(engine.model, model) == {True}
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # past_key_values is deprecated: the cache keyword
            before = await engine.generate(greedy())
        async with local.exclusive():
            await asyncio.to_thread(a_training_step, trainer)
        await local.sync.push(model, 1)
        await weight_sync(copied, tmp_path / "unused").push(model, 1)
        after, expected = await engine.generate(greedy()), await copied.generate(greedy())
        assert after.output_versions == [1] * after.output_len
        assert after.output_tokens == expected.output_tokens
        assert after.output_tokens != before.output_tokens  # the adapter's step changed them
        diff = torch.tensor(after.output_logprobs) - torch.tensor(expected.output_logprobs)
        assert float(diff.abs().max()) <= 1e-5
    await copied.close()
