"""Several policies (rltap.train.policies, rltap.train.policy_store): one base model with an
adapter per policy, a trainer per adapter that trains only on its policy's tokens (its own
AdamW over its adapter alone, the base weights bit-identical, a policy with no token unchanged),
a sync that moves only the changed adapters and their versions into a real embedded engine
(which then serves each policy's trainer logprobs within 1e-5), adapter folders per policy for
a server engine, and a checkpoint round trip that restores every adapter and optimizer exactly
and refuses other policies or ranks."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
from weight_testing import max_logprob_diff

from rltap.config import LoraConfig, UpdateConfig
from rltap.config.flags import ConfigError
from rltap.config.policies import PolicyConfig
from rltap.engines.base import WeightFolder
from rltap.engines.transformers import TransformersEngine
from rltap.record.pack import TreePack, pack_interactions
from rltap.record.types import ModelRequest
from rltap.testing.packs import recorded_call as call
from rltap.train.policies import (
    PolicyTrainers,
    active_adapter,
    adapter_parameters,
    by_interaction,
    policy_model,
)
from rltap.train.policy_store import (
    PolicyMismatch,
    PolicySync,
    check_policies_checkpoint,
    load_optimizers,
    save_policies,
)
from rltap.train.run_dir import RunDir

PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]
POLICIES = {
    "tutor": PolicyConfig(agents=("Math Tutor",), lora_rank=4),
    "student": PolicyConfig(agents=("Student",), lora_rank=8, lr=5e-3),
    "idle": PolicyConfig(agents=("Nobody",), lora_rank=2),
}


def episode(seed: int = 0, student_seed: int | None = None) -> tuple[TreePack, dict[str, str]]:
    """A tutor's call, two replies of the student to it (each policy's rewards differ among
    its own calls: advantages are normalised per policy), the tutor's answer to the first;
    behaviour logprobs unlike the model's (the student's drawn from `student_seed`, if
    given)."""
    first = call([1, 2, 3, 4], [10, 11, 12])
    second = call([5, 6], [20, 21], first)
    third = call([7], [30, 31, 32], second)
    fourth = call([5, 8], [22, 23], first)
    calls = [first, second, third, fourth]
    rewards = dict(zip((c.interaction_id for c in calls), (0.5, -1.0, 2.0, 1.0), strict=True))
    pack = pack_interactions(calls, rewards)
    owners = {first.interaction_id: "tutor", second.interaction_id: "student"}
    owners[third.interaction_id] = "tutor"
    owners[fourth.interaction_id] = "student"
    generated = pack.loss_mask == 1
    pack.logprobs[generated] = -np.random.default_rng(seed).uniform(5.0, 15.0, generated.sum())
    if student_seed is not None:
        student = by_interaction(owners)(pack, "student") & generated
        noise = np.random.default_rng(student_seed).uniform(5.0, 15.0, student.sum())
        pack.logprobs[student] = -noise
    return pack, owners


def model_of(tiny_model_dir: Path, policies: Any = POLICIES, checkpoint: Path | None = None) -> Any:
    torch.manual_seed(0)  # the same initial adapters each time
    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float32")
    settings = LoraConfig(lora_rank=4)
    return policy_model(base, policies, settings, base=str(tiny_model_dir), checkpoint=checkpoint)


def stepped(
    model: Any, student_seed: int | None = None, steps: int = 1, *, ones: bool = False
) -> PolicyTrainers:
    """`steps` steps of the policies on two episodes; `ones`: each policy's tokens given as an
    int32 mask of ones (as `TreePack.policy_mask` gives it), not booleans."""
    trainers = PolicyTrainers(model, POLICIES, UpdateConfig(lr=1e-2))
    for _ in range(steps):
        packs, owners = zip(*(episode(s, student_seed) for s in (0, 1)), strict=True)
        merged = {key: value for owner in owners for key, value in owner.items()}
        tokens_of = by_interaction(merged)
        if ones:
            trainers.step(list(packs), lambda p, n, t=tokens_of: t(p, n).astype(np.int32))
        else:
            trainers.step(list(packs), tokens_of)
    return trainers


def tensors(model: Any, keep: Any) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.get_base_model().state_dict().items() if keep(k)}


def adapter(model: Any, name: str) -> dict[str, torch.Tensor]:
    return tensors(model, lambda key: f".lora_A.{name}." in key or f".lora_B.{name}." in key)


def test_each_policy_trains_its_own_adapter_on_its_own_tokens(tiny_model_dir: Path) -> None:
    model = model_of(tiny_model_dir)
    base = tensors(model, lambda key: ".lora_" not in key)
    before = {name: adapter(model, name) for name in POLICIES}
    trainers = PolicyTrainers(model, POLICIES, UpdateConfig(lr=1e-2, kl_coef=0.1))
    pack, owners = episode()
    metrics, changed = trainers.step([pack], by_interaction(owners))

    assert changed == ["tutor", "student"]
    assert metrics["tutor/tokens"] == 6
    assert metrics["student/tokens"] == 4
    assert metrics["idle/tokens"] == 0
    assert metrics["tutor/kl"] == 0
    assert metrics["student/entropy"] > 0
    assert {key.split("/")[0] for key in metrics} == set(POLICIES)
    after = tensors(model, lambda key: ".lora_" not in key)
    assert all(torch.equal(after[key], base[key]) for key in base)  # the base model stays
    for name in ("tutor", "student"):
        moved = adapter(model, name)
        assert all(not torch.equal(moved[k], before[name][k]) for k in moved if ".lora_B." in k)
    idle = adapter(model, "idle")
    assert all(torch.equal(idle[k], before["idle"][k]) for k in idle)
    for name, trainer in trainers.trainers.items():
        held = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
        assert held == {id(p) for p in adapter_parameters(model, name)}
        assert len(held) == 28  # 2 layers x 7 linear layers x (A, B), its own adapter's only
    assert trainers.trainers["student"].optimizer.param_groups[0]["lr"] == 5e-3
    assert trainers.trainers["tutor"].optimizer.param_groups[0]["lr"] == 1e-2
    # the KL reference is the base model (every adapter disabled), which the adapters left
    metrics, _ = trainers.step([pack], by_interaction(owners))
    assert metrics["tutor/kl"] > 1e-6
    assert metrics["student/kl"] > 1e-6


def test_a_policy_learns_nothing_from_another_policys_tokens(tiny_model_dir: Path) -> None:
    one, other = model_of(tiny_model_dir), model_of(tiny_model_dir)
    stepped(one, student_seed=7)
    stepped(other, student_seed=8, ones=True)  # only the student's behaviour logprobs differ
    tutor_one, tutor_other = adapter(one, "tutor"), adapter(other, "tutor")
    assert all(torch.equal(tutor_one[k], tutor_other[k]) for k in tutor_one)
    student_one, student_other = adapter(one, "student"), adapter(other, "student")
    assert any(not torch.equal(student_one[k], student_other[k]) for k in student_one)


def test_the_packs_own_policies_choose_the_tokens(tiny_model_dir: Path) -> None:
    one, other = model_of(tiny_model_dir), model_of(tiny_model_dir)
    pack, owners = episode()
    by_call = PolicyTrainers(one, POLICIES, UpdateConfig(lr=1e-2))
    by_call.step([pack], by_interaction(owners))
    stamped = copy.deepcopy(pack)
    stamped.interaction_policies = [owners.get(i) for i in stamped.interaction_ids]
    by_pack = PolicyTrainers(other, POLICIES, UpdateConfig(lr=1e-2))
    _, changed = by_pack.step([stamped], TreePack.policy_mask)  # the capture side's column
    assert changed == ["tutor", "student"]
    for name in POLICIES:
        mine, theirs = adapter(one, name), adapter(other, name)
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)


@pytest.mark.slow  # seconds of decoding: make test runs it, make check does not
async def test_the_sync_moves_only_the_changed_adapters_and_their_versions(
    tiny_model_dir: Path, tiny_model: Any
) -> None:
    model = model_of(tiny_model_dir)
    trainers = stepped(model)
    engine = TransformersEngine(copy.deepcopy(tiny_model), eos_token_ids=[])
    sync = PolicySync(engine, Path("unused"))
    replies: dict[str | None, Any] = {}
    try:
        assert await sync.push(trainers, ["tutor", "student"]) == {"tutor": 1, "student": 1}
        for policy in ("tutor", "student", "idle", None):
            request = ModelRequest(
                input_ids=PROMPT, max_new_tokens=10, temperature=1.0, seed=3, policy=policy
            )
            replies[policy] = await engine.generate(request)
        gaps = gaps_to_trainer(model, tiny_model, replies)
        pack, owners = episode()  # the tutor's tokens only, this time
        tutor_only = {key: "tutor" for key, value in owners.items() if value == "tutor"}
        _, changed = trainers.step([pack], by_interaction(tutor_only))
        assert changed == ["tutor"]
        assert await sync.push(trainers, changed) == {"tutor": 2}
        versions = {name: engine.policy_version(name) for name in POLICIES}
    finally:
        await engine.close()
    assert versions == {"tutor": 2, "student": 1, "idle": 0}
    assert trainers.versions == versions
    for policy in ("tutor", "student"):
        assert replies[policy].output_versions == [1] * 10
    assert replies["idle"].output_versions == [0] * 10
    # each policy's reply has its trainer adapter's logprobs, not another's or the base model's
    assert gaps["tutor", "tutor"] <= 1e-5
    assert gaps["student", "student"] <= 1e-5
    assert gaps["tutor", "student"] > 1e-3
    assert gaps["student", "tutor"] > 1e-3
    assert gaps["tutor", None] > 1e-3
    assert gaps["student", None] > 1e-3
    # no adapter sent for idle (nor a request of no policy): the base model
    assert gaps["idle", None] <= 1e-5
    assert gaps[None, None] <= 1e-5


def gaps_to_trainer(
    model: Any, base: Any, replies: dict[str | None, Any]
) -> dict[tuple[str | None, str | None], float]:
    """Each reply's largest logprob gap to each trainer adapter (None: the base model)."""
    model.eval()
    gaps: dict[tuple[str | None, str | None], float] = {}
    for policy, reply in replies.items():
        for scorer in ("tutor", "student"):
            with active_adapter(model, scorer):
                gaps[policy, scorer] = max_logprob_diff(model, reply)
        gaps[policy, None] = max_logprob_diff(base, reply)
    return gaps


class _FolderEngine:
    """A server engine that loads a policy's adapter folder by name (as recorded here)."""

    takes_state_dict = False

    def __init__(self) -> None:
        self.loaded: list[tuple[str, int, Path]] = []

    async def update_weights(self, source: WeightFolder, *, version: int, policy: str) -> int:
        self.loaded.append((policy, version, await source.written()))
        return version


class _OneAdapterEngine(_FolderEngine):
    async def update_weights(self, source: WeightFolder, *, version: int | None = None) -> int:  # type: ignore[override]
        return 0


async def test_a_server_engine_gets_a_folder_per_policy(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    trainers = stepped(model_of(tiny_model_dir))
    engine = _FolderEngine()
    sync = PolicySync(engine, tmp_path / "sync")  # type: ignore[arg-type]
    for _ in range(4):
        await sync.push(trainers, ["tutor", "student"])
    assert [(p, v) for p, v, _ in engine.loaded[-2:]] == [("tutor", 4), ("student", 4)]
    for policy in ("tutor", "student"):
        kept = sorted(p.name for p in (tmp_path / "sync" / policy).iterdir())
        assert kept == ["adapter-v2", "adapter-v3", "adapter-v4"]
        files = {p.name for p in (tmp_path / "sync" / policy / "adapter-v4").iterdir()}
        assert {"adapter_config.json", "adapter_model.safetensors"} <= files
    config = json.loads((tmp_path / "sync/student/adapter-v4/adapter_config.json").read_text())
    assert config["r"] == 8
    with pytest.raises(ConfigError, match="loads no LoRA adapter folder under a policy's name"):
        await PolicySync(_OneAdapterEngine(), tmp_path / "other").push(trainers, ["tutor"])  # type: ignore[arg-type]


def test_a_checkpoint_restores_every_adapter_and_optimizer(
    tiny_model_dir: Path, qwen_tokenizer: Any, tmp_path: Path
) -> None:
    model = model_of(tiny_model_dir)
    trainers = stepped(model, steps=2)
    trainers.versions.update({"tutor": 2, "student": 2})
    run = RunDir(tmp_path / "run")
    checkpoint = save_policies(run, 2, trainers, qwen_tokenizer, {"version": 2})
    run.close()
    for name in POLICIES:
        files = {p.name for p in (checkpoint.path / name).iterdir()}
        assert {"adapter_config.json", "adapter_model.safetensors"} <= files
        # idle never stepped: its AdamW has no state to save
        assert ("optimizer" in files) == (name != "idle")
    assert checkpoint.state["policies"]["student"] == {"lora_rank": 8, "version": 2}

    versions = check_policies_checkpoint(checkpoint, POLICIES)
    resumed = model_of(tiny_model_dir, checkpoint=checkpoint.path)
    again = PolicyTrainers(resumed, POLICIES, UpdateConfig(lr=1e-2), versions=versions)
    load_optimizers(again, checkpoint)
    assert again.versions == {"tutor": 2, "student": 2, "idle": 0}
    for name in POLICIES:
        saved, loaded = adapter(model, name), adapter(resumed, name)
        assert saved.keys() == loaded.keys()
        assert all(torch.equal(saved[k], loaded[k]) for k in saved)
        state = trainers.trainers[name].optimizer.state_dict()
        restored = again.trainers[name].optimizer.state_dict()
        assert state["param_groups"] == restored["param_groups"]
        assert state["state"].keys() == restored["state"].keys()
        for key, values in state["state"].items():
            for field, value in values.items():
                assert torch.equal(value, restored["state"][key][field]), (name, key, field)
    # the same next step from the checkpoint as from the trainers that saved it
    pack, owners = episode(2)
    trainers.step([pack], by_interaction(owners))
    again.step([episode(2)[0]], by_interaction(owners))
    for name in POLICIES:
        saved, loaded = adapter(model, name), adapter(resumed, name)
        assert all(torch.equal(saved[k], loaded[k]) for k in saved)

    fewer = {name: POLICIES[name] for name in ("tutor", "student")}
    with pytest.raises(PolicyMismatch, match="policies \\['idle', 'student', 'tutor'\\]"):
        check_policies_checkpoint(checkpoint, fewer)
    other_rank = {**POLICIES, "tutor": PolicyConfig(agents=("Math Tutor",), lora_rank=8)}
    with pytest.raises(PolicyMismatch, match="'tutor' as a rank-4 adapter; the run gives it"):
        check_policies_checkpoint(checkpoint, other_rank)
    with pytest.raises(ValueError, match="rank-4 adapter; policy 'tutor' has lora_rank 8"):
        model_of(tiny_model_dir, other_rank, checkpoint=checkpoint.path)
