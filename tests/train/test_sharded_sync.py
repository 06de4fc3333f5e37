"""The weights of a trainer sharded over 2 ranks reach every kind of engine (rltap.train.sync,
rltap.train.gather): rank 0 writes the folder a vLLM or SGLang server loads (fake servers on
127.0.0.1 record each request and the files on disk) from weights gathered a chunk at a time,
and an embedded engine with a copy of its own reads it; each then holds the trained weights. With
vLLM's weight transfer (`--weight-transfer nccl|ipc`) rank 0 streams them instead, each tensor
gathered as it is sent, and a transfer that fails halfway leaves the ranks in step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from sharded_testing import push_from_shards, transfer_from_shards
from transformers import AutoModelForCausalLM

from rltap.train.gather import INDEX
from rltap.train.launcher import launch


@pytest.mark.slow
def test_a_sharded_trainer_pushes_its_weights_into_every_engine(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    seen = launch(push_from_shards, (str(tiny_model_dir), str(tmp_path)), 2)[0]
    assert seen is not None
    assert seen["versions"] == [5, 6, 7]
    # vLLM: the folder was whole on disk before the server was asked to pause and reload it.
    assert seen["vllm"] == [
        "/is_paused", "/pause", "/collective_rpc", "/reset_prefix_cache",
        "/update_weight_version", "/resume",
    ]  # fmt: skip
    assert {"config.json", INDEX} <= set(seen["vllm_files"])
    assert seen["sglang"] == {
        "model_path": str((tmp_path / "sglang").resolve()),
        "weight_version": "6",
    }
    trained = torch.load(tmp_path / "trained.pt")
    initial = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)).state_dict()
    assert any(not torch.equal(trained[k], initial[k]) for k in trained)  # a step was taken
    for folder in ("vllm", "sglang"):
        index = json.loads((tmp_path / folder / INDEX).read_text())
        assert sorted(index["weight_map"]) == sorted(trained)
        loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / folder)).state_dict()
        for name, tensor in trained.items():
            assert torch.equal(loaded[name], tensor), (folder, name)
    embedded = torch.load(tmp_path / "embedded.pt")
    for name, tensor in trained.items():
        assert torch.equal(embedded[name], tensor), name


@pytest.mark.slow
def test_a_sharded_trainer_streams_its_weights_by_weight_transfer(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    seen = launch(transfer_from_shards, (str(tiny_model_dir), str(tmp_path)), 2)[0]
    assert seen is not None
    assert "failed at update_weights" in seen["failed"]
    assert seen["version"] == 2
    assert seen["chunks"] > 2
    trained = torch.load(tmp_path / "trained.pt")
    transferred = torch.load(tmp_path / "transferred.pt")
    tied = {"lm_head.weight"} if "lm_head.weight" not in transferred else set()
    assert sorted(transferred) == sorted(trained.keys() - tied)
    for name, tensor in transferred.items():
        assert torch.equal(tensor, trained[name]), name
