"""Sharded data-parallel training (rltap.train.distributed): two real gloo ranks, FSDP2 on each
decoder layer and the root, train exactly as one process does. The tiny model, the same seed,
two steps on the same packs (`distributed_testing.fixed_packs`, micro-batches of 24 tokens, so
packs are split at branch points and dealt unevenly): after each step every weight of the 2-rank
model equals the 1-process model's within `WEIGHTS_ATOL`, and every metric within `METRICS_RTOL`.

Measured in fp32 with lr 1e-2 (2026-12-05, torch 2.13 CPU): the largest weight difference is
7e-7 after the first step and 1.3e-5 after the second (full fine-tuning; LoRA rank 4: 1e-7
and 3e-6; --minibatches 2: 2.5e-6 and 1.4e-5), from fp32 sums taken in another order (the
ranks' micro-batches, the reduce-scatter) that AdamW's normalised update carries into weights
whose gradients are near zero; the metrics differ by at most ~1e-7 relative.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from distributed_testing import fail_in_rank, fixed_packs, train_ranks

from rltap.train.distributed import RankFailed, Ranks, launch

WEIGHTS_ATOL = 5e-5
METRICS_RTOL = 1e-5


def _run(model_dir: Path, out: Path, world: int, lora_rank: int, minibatches: int) -> Any:
    out.mkdir()
    args = (str(model_dir), str(out), lora_rank, minibatches)
    if world == 1:  # the same program in this process, without a process group
        threads = torch.get_num_threads()
        try:
            return [train_ranks(*args)]
        finally:
            torch.set_num_threads(threads)
    return launch(train_ranks, args, world)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lora_rank", "minibatches"),
    [
        pytest.param(0, 1, id="full"),
        pytest.param(4, 1, id="lora"),
        pytest.param(0, 2, id="minibatches-2"),
    ],
)
def test_two_ranks_train_as_one_process(
    tiny_model_dir: Path, tmp_path: Path, lora_rank: int, minibatches: int
) -> None:
    one = _run(tiny_model_dir, tmp_path / "one", 1, lora_rank, minibatches)
    two = _run(tiny_model_dir, tmp_path / "two", 2, lora_rank, minibatches)
    assert two[0] == two[1]  # every rank reports the step's metrics over all ranks
    for step in range(2):
        for name, value in one[0][step].items():
            assert two[0][step][name] == pytest.approx(value, rel=METRICS_RTOL, abs=1e-9), name
        alone = torch.load(tmp_path / "one" / f"step-{step}.pt")
        sharded = torch.load(tmp_path / "two" / f"step-{step}.pt")
        assert sorted(sharded) == sorted(alone)
        worst = max(float((alone[k] - sharded[k]).abs().max()) for k in alone)
        assert worst <= WEIGHTS_ATOL, (step, worst)
    assert one[0][0]["tokens"] == sum(int(p.loss_mask.sum()) for p in fixed_packs())


def test_packs_are_dealt_by_token_count() -> None:
    packs = fixed_packs()  # 13, 23, 29, 16 and 26 tokens
    shares = [Ranks(rank, 2).deal(packs) for rank in range(2)]
    assert [[len(p) for p in share] for share in shares] == [[13, 29, 16], [23, 26]]
    assert Ranks().deal(packs) == packs
    assert sorted(map(id, shares[0] + shares[1])) == sorted(map(id, packs))


def test_a_failing_rank_fails_the_launch_naming_it() -> None:
    with pytest.raises(RankFailed, match="rank 1: ValueError: rank 1 fails"):
        launch(fail_in_rank, (1,), 2)
