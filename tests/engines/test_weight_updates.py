"""`InferenceEngine.update_weights` per engine: the embedded engines copy a state dict or a saved
folder into their model in place, the server engines drive their server's reload API (fake vLLM
and SGLang servers on 127.0.0.1, `tests/reload_server.py`), and a source an engine cannot take,
or weights it cannot load, is a clear error that leaves the version as it was.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from weight_testing import (
    VLLM_DEV_ROUTES,
    ReloadServer,
    max_logprob_diff,
    perturbed,
    small_qwen2,
)

from rltap.areal import ArealEngine
from rltap.engines.base import WeightFolder
from rltap.engines.scripted import ScriptedEngine
from rltap.engines.sglang import SGLangEngine
from rltap.engines.transformers import TransformersEngine
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import EngineError, InvalidRequest
from rltap.record.types import ModelRequest
from rltap.testing import ScriptedArealEngine

PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


def _absolute(path: Path) -> str:
    return str(path.resolve())


def _saver(model: Any) -> Any:
    async def save(folder: Path) -> None:
        model.save_pretrained(str(folder))

    return save


# --- embedded engines -------------------------------------------------------------------------


async def test_transformers_engine_loads_a_saved_folder_in_place(
    tiny_model: Any, tmp_path: Path
) -> None:
    model = copy.deepcopy(tiny_model)
    trainer = perturbed(tiny_model)
    engine = TransformersEngine(model, eos_token_ids=[])
    try:
        weight = model.get_parameter("model.layers.0.mlp.down_proj.weight")
        assert await engine.update_weights(WeightFolder(tmp_path / "w", _saver(trainer))) == 1
        # Copied into the model's own tensors: no second model.
        assert model.get_parameter("model.layers.0.mlp.down_proj.weight") is weight
        assert torch.equal(weight, trainer.get_parameter("model.layers.0.mlp.down_proj.weight"))
        request = ModelRequest(input_ids=PROMPT, max_new_tokens=8, temperature=1.0, seed=3)
        response = await engine.generate(request)
    finally:
        await engine.close()
    assert response.output_versions == [1] * 8
    assert max_logprob_diff(trainer, response) <= 1e-5


async def test_an_incomplete_source_is_refused_unless_partial(tiny_model: Any) -> None:
    model = copy.deepcopy(tiny_model)
    engine = TransformersEngine(model, eos_token_ids=[])
    name = "model.layers.0.mlp.down_proj.weight"
    subset = {name: model.get_parameter(name).detach() * 2.0}
    try:
        with pytest.raises(EngineError, match=r"lacks \d+ of the engine's"):
            await engine.update_weights(subset, version=3)
        assert engine.version == 0
        assert await engine.update_weights(subset, version=3, partial=True) == 3
        with pytest.raises(EngineError, match="unknown weight names"):
            await engine.update_weights({"no.such.weight": torch.zeros(1)}, partial=True)
        assert engine.version == 3
    finally:
        await engine.close()


async def test_tied_weights_saved_once_still_make_a_complete_folder(tmp_path: Path) -> None:
    model = small_qwen2(tied=True)
    trainer = perturbed(model)
    engine = TransformersEngine(model, eos_token_ids=[])
    try:
        await engine.update_weights(WeightFolder(tmp_path, _saver(trainer)), version=1)
    finally:
        await engine.close()
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")  # saved once
    assert torch.equal(model.lm_head.weight, trainer.model.embed_tokens.weight)
    assert model.lm_head.weight is model.model.embed_tokens.weight


async def test_scripted_engine_scores_with_the_new_weights(
    tiny_model: Any, qwen_tokenizer: Any, tmp_path: Path
) -> None:
    engine = ScriptedEngine(
        lambda m, t, turn: "hi", copy.deepcopy(tiny_model), tokenizer=qwen_tokenizer
    )
    trainer = perturbed(tiny_model, seed=2)
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=8)
    try:
        before = await engine.generate(request)
        assert await engine.update_weights(trainer.state_dict()) == 1
        after = await engine.generate(request)
        folder = WeightFolder(tmp_path, _saver(tiny_model))
        assert await engine.update_weights(folder, version=5) == 5
        restored = await engine.generate(request)
    finally:
        await engine.close()
    assert before.output_tokens == after.output_tokens == restored.output_tokens
    assert after.output_versions == [1] * after.output_len
    assert max_logprob_diff(trainer, after) <= 1e-5
    assert max_logprob_diff(tiny_model, after) > 1e-2
    assert restored.output_versions == [5] * restored.output_len
    assert restored.output_logprobs == pytest.approx(before.output_logprobs, abs=1e-6)


# --- server engines against fake reload servers -----------------------------------------------


async def test_vllm_reloads_a_folder_saved_elsewhere_as_the_next_version(tmp_path: Path) -> None:
    async with ReloadServer(dict(VLLM_DEV_ROUTES)) as server:
        engine = VLLMEngine(server.url, model="tiny", version=4)
        assert await engine.update_weights(WeightFolder(tmp_path / "shared")) == 5
    assert engine.version == 5
    rpc = {
        "method": "reload_weights",
        "kwargs": {"weights_path": str((tmp_path / "shared").resolve())},
    }
    assert server.requests[2] == ("POST", "/collective_rpc", {}, rpc)
    assert server.requests[4] == ("POST", "/update_weight_version", {}, {"new_version": "5"})
    assert server.paths()[-1] == "/resume"


async def test_vllm_without_dev_mode_fails_before_saving(tmp_path: Path) -> None:
    saved: list[Path] = []

    async def save(folder: Path) -> None:
        saved.append(folder)

    async with ReloadServer({}) as server:
        engine = VLLMEngine(server.url, model="tiny")
        with pytest.raises(EngineError, match="VLLM_SERVER_DEV_MODE=1"):
            await engine.update_weights(WeightFolder(tmp_path, save), version=1)
    assert server.paths() == ["/is_paused"]
    assert saved == []
    assert engine.version == 0


@pytest.mark.parametrize(
    ("route", "reply", "error"),
    [
        pytest.param("/collective_rpc", (500, {"error": "no such file"}), "no such file", id="rpc"),
        pytest.param(
            "/reset_prefix_cache",
            (200, {"success": False}),
            "did not reset its prefix cache",
            id="prefix-cache",
        ),
    ],
)
async def test_vllm_failure_after_the_pause_says_the_server_stays_paused(
    tmp_path: Path, route: str, reply: tuple[int, Any], error: str
) -> None:
    async with ReloadServer({**VLLM_DEV_ROUTES, route: reply}) as server:
        engine = VLLMEngine(server.url, model="tiny")
        with pytest.raises(EngineError, match=rf"{error}.*stays paused"):
            await engine.update_weights(WeightFolder(tmp_path), version=1)
    assert engine.version == 0
    assert "/resume" not in server.paths()
    assert "/update_weight_version" not in server.paths()


async def test_sglang_posts_update_weights_from_disk(tmp_path: Path) -> None:
    reply = {"success": True, "message": "Succeeded to update model weights."}
    async with ReloadServer({"/update_weights_from_disk": (200, reply)}) as server:
        engine = SGLangEngine(server.url)
        assert await engine.update_weights(WeightFolder(tmp_path), version=7) == 7
    body = {"model_path": _absolute(tmp_path), "weight_version": "7"}
    assert server.requests == [("POST", "/update_weights_from_disk", {}, body)]


@pytest.mark.parametrize("status", [pytest.param(400, id="400"), pytest.param(200, id="200")])
async def test_sglang_unsuccessful_update_is_an_engine_error(tmp_path: Path, status: int) -> None:
    reply = {"success": False, "message": "Failed to get weights iterator: shape mismatch"}
    async with ReloadServer({"/update_weights_from_disk": (status, reply)}) as server:
        engine = SGLangEngine(server.url)
        with pytest.raises(EngineError, match=r"could not load the weights.*shape mismatch"):
            await engine.update_weights(WeightFolder(tmp_path), version=1)
    assert engine.version == 0


async def test_sglang_reply_without_success_field_is_an_engine_error(tmp_path: Path) -> None:
    async with ReloadServer({"/update_weights_from_disk": (500, {"detail": "boom"})}) as server:
        engine = SGLangEngine(server.url)
        with pytest.raises(EngineError, match="boom"):
            await engine.update_weights(WeightFolder(tmp_path), version=1)
    assert engine.version == 0


@pytest.mark.parametrize(
    "engine",
    [
        pytest.param(VLLMEngine("http://127.0.0.1:9", model="tiny"), id="vllm"),
        pytest.param(SGLangEngine("http://127.0.0.1:9"), id="sglang"),
    ],
)
async def test_a_server_engine_refuses_a_state_dict(engine: Any) -> None:
    assert not engine.takes_state_dict
    with pytest.raises(InvalidRequest, match="WeightFolder"):
        await engine.update_weights({"w": torch.zeros(1)}, version=1)
    assert engine.version == 0


async def test_an_areal_engine_refuses_updates(qwen_tokenizer: Any) -> None:
    engine = ArealEngine(ScriptedArealEngine(qwen_tokenizer, ["4"], version=2))
    with pytest.raises(InvalidRequest, match="AReaL's trainer"):
        await engine.update_weights(WeightFolder(Path("unused")), version=3)
    assert engine.version == 2
