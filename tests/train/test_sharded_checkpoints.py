"""Checkpoints of a sharded trainer (rltap.train.gather): the Hugging Face folder rank 0 writes
from weights gathered a chunk at a time, and AdamW's state as DCP shards, resume at another
number of ranks. The tiny model, one step on `fixed_packs()` at one world size, the checkpoint
loaded at the other, a second step: its weights equal those of two uninterrupted steps in one
process within `WEIGHTS_ATOL`, the bound of tests/train/test_distributed.py (measured here
2026-12-05, fp32: at most 1.3e-5 full, 3e-6 LoRA; a lost or misplaced AdamW moment moves a
weight by ~lr = 1e-2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from distributed_testing import train_ranks
from safetensors import safe_open
from sharded_testing import resume_one_step, save_after_one_step
from transformers import AutoModelForCausalLM

from rltap.train.gather import INDEX
from rltap.train.launcher import launch

WEIGHTS_ATOL = 5e-5
# Small shards: the tiny model's folder is written in several (its embedding alone is one).
CHUNK_BYTES = 400_000


def _at(world: int, program: Any, *args: Any) -> None:
    if world == 1:  # the same program in this process, without a process group
        threads = torch.get_num_threads()
        try:
            program(*args)
        finally:
            torch.set_num_threads(threads)
    else:
        launch(program, args, world)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("saved_on", "resumed_on", "lora_rank"),
    [
        pytest.param(2, 1, 0, id="2-to-1"),
        pytest.param(1, 2, 0, id="1-to-2"),
        pytest.param(2, 1, 4, id="lora-2-to-1"),
    ],
)
def test_a_checkpoint_resumes_at_another_number_of_ranks(
    tiny_model_dir: Path, tmp_path: Path, saved_on: int, resumed_on: int, lora_rank: int
) -> None:
    straight = tmp_path / "straight"
    straight.mkdir()
    _at(1, train_ranks, str(tiny_model_dir), str(straight), lora_rank, 1)
    _at(saved_on, save_after_one_step, str(tiny_model_dir), str(tmp_path), lora_rank, CHUNK_BYTES)
    _at(resumed_on, resume_one_step, str(tiny_model_dir), str(tmp_path), lora_rank)
    expected = torch.load(straight / "step-1.pt")
    resumed = torch.load(tmp_path / "resumed.pt")
    assert sorted(resumed) == sorted(expected)
    worst = max(float((expected[k] - resumed[k]).abs().max()) for k in expected)
    assert worst <= WEIGHTS_ATOL, worst
    optimizer = tmp_path / "checkpoint" / "optimizer"
    assert len(list(optimizer.glob("*.distcp"))) == saved_on  # each rank wrote its part


def _tied_copy(model_dir: Path, folder: Path) -> Path:
    """The tiny model's config with its output layer tied to the embedding, random weights."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model_dir), tie_word_embeddings=True)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(str(folder))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_the_gathered_folder_is_what_save_pretrained_writes(
    tiny_model_dir: Path, tmp_path: Path, tied: bool
) -> None:
    """Written on 2 ranks in shards of CHUNK_BYTES, the folder holds the tensors
    `save_pretrained` writes (a tied output layer once, as the embedding) and transformers loads
    every weight of it, equal to the same step's weights in one process."""
    model_dir = _tied_copy(tiny_model_dir, tmp_path / "tied") if tied else tiny_model_dir
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    _at(1, save_after_one_step, str(model_dir), str(one), 0, 0)
    _at(2, save_after_one_step, str(model_dir), str(two), 0, CHUNK_BYTES)
    folder = two / "checkpoint"
    index = json.loads((folder / INDEX).read_text())
    shards = sorted(path.name for path in folder.glob("*.safetensors"))
    assert len(shards) >= 2  # chunked
    assert sorted(set(index["weight_map"].values())) == shards
    alone = AutoModelForCausalLM.from_pretrained(str(one / "checkpoint"))
    alone.save_pretrained(str(tmp_path / "save_pretrained"))
    with safe_open(str(tmp_path / "save_pretrained" / "model.safetensors"), "pt") as written:
        assert sorted(index["weight_map"]) == sorted(written.keys())
    assert ("lm_head.weight" in index["weight_map"]) == (not tied)
    loaded, info = AutoModelForCausalLM.from_pretrained(str(folder), output_loading_info=True)
    assert not info["missing_keys"]
    assert not info["unexpected_keys"]
    expected = alone.state_dict()
    worst = max(float((expected[k] - v).abs().max()) for k, v in loaded.state_dict().items())
    assert worst <= WEIGHTS_ATOL, worst
    assert (loaded.lm_head.weight is loaded.model.embed_tokens.weight) == tied
