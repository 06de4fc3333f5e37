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

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from distributed_testing import (
    assert_two_steps_trained,
    backend_of,
    die_in_rank,
    fail_in_rank,
    fixed_packs,
    train_ranks,
)
from process_testing import descendant_pids, left_behind
from safetensors.torch import load_file

from rltap.cli.commands import main
from rltap.train.distributed import Ranks
from rltap.train.launcher import RankFailed, launch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_toy"

WEIGHTS_ATOL = 5e-5
METRICS_RTOL = 1e-5


def _run(
    model_dir: Path, out: Path, world: int, lora_rank: int, minibatches: int, kl_coef: float
) -> Any:
    out.mkdir()
    args = (str(model_dir), str(out), lora_rank, minibatches, kl_coef)
    if world == 1:  # the same program in this process, without a process group
        threads = torch.get_num_threads()
        try:
            return [train_ranks(*args)]
        finally:
            torch.set_num_threads(threads)
    return launch(train_ranks, args, world)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lora_rank", "minibatches", "kl_coef"),
    [
        pytest.param(0, 1, 0.0, id="full"),
        pytest.param(4, 1, 0.0, id="lora"),
        pytest.param(0, 2, 0.0, id="minibatches-2"),
        pytest.param(0, 1, 0.1, id="kl-reference"),
    ],
)
def test_two_ranks_train_as_one_process(
    tiny_model_dir: Path, tmp_path: Path, lora_rank: int, minibatches: int, kl_coef: float
) -> None:
    one = _run(tiny_model_dir, tmp_path / "one", 1, lora_rank, minibatches, kl_coef)
    two = _run(tiny_model_dir, tmp_path / "two", 2, lora_rank, minibatches, kl_coef)
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


@pytest.mark.slow
def test_one_launched_rank_shards_over_its_group_of_one_and_trains_as_one_process(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Under a launcher (torchrun --nproc-per-node 1) the single rank gets a process group and
    the model is sharded over it (FSDP2's precision and offload apply on one GPU): the same
    steps as without one."""
    one = _run(tiny_model_dir, tmp_path / "one", 1, 0, 1, 0.0)
    (tmp_path / "group").mkdir()
    args = (str(tiny_model_dir), str(tmp_path / "group"), 0, 1, 0.0)
    grouped = launch(train_ranks, args, 1)
    for name, value in one[0][1].items():
        assert grouped[0][1][name] == pytest.approx(value, rel=METRICS_RTOL, abs=1e-9), name
    alone = torch.load(tmp_path / "one" / "step-1.pt")
    sharded = torch.load(tmp_path / "group" / "step-1.pt")
    assert max(float((alone[k] - sharded[k]).abs().max()) for k in alone) <= WEIGHTS_ATOL


def test_packs_are_dealt_by_token_count() -> None:
    packs = fixed_packs()  # 13, 23, 29, 16 and 26 tokens
    shares = [Ranks(rank, 2).deal(packs) for rank in range(2)]
    assert [[len(p) for p in share] for share in shares] == [[13, 29, 16], [23, 26]]
    assert Ranks().deal(packs) == packs
    assert sorted(map(id, shares[0] + shares[1])) == sorted(map(id, packs))


@pytest.mark.slow
def test_a_failing_rank_fails_the_launch_naming_it() -> None:
    with pytest.raises(RankFailed, match="rank 1: ValueError: rank 1 fails"):
        launch(fail_in_rank, (1,), 2)


@pytest.mark.slow
def test_a_killed_rank_fails_the_launch_with_its_last_lines(tmp_path: Path) -> None:
    """A rank killed by SIGKILL leaves no error file: the launch names the rank and the signal,
    quotes what it wrote last, and stops the rank waiting for it in a collective."""
    with pytest.raises(RankFailed) as failed:
        launch(die_in_rank, (1,), 2, log_dir=tmp_path)
    message = str(failed.value)
    assert "rank 1: Signal 9 (SIGKILL)" in message
    assert "rank 1 is about to die" in message
    assert list(tmp_path.glob("*/attempt_0/1/stderr.log"))  # the ranks' logs are kept


@pytest.mark.slow
def test_nccl_without_a_gpu_falls_back_to_gloo(capfd: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: NCCL runs")  # the fallback is for CPU machines
    assert launch(backend_of, ("nccl",), 2) == ["gloo", "gloo"]
    assert "NCCL needs a GPU" in capfd.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_rltap_train_runs_on_two_ranks(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rltap train --nproc-per-node 2`: rank 0 rolls out, both ranks train, rank 0 syncs the
    gathered weights into its engine and checkpoints them; no rank outlives the command."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run = tmp_path / "run"
    argv = [
        "train", f"{EXAMPLE / 'agent.py'}:Agent", "--data", str(EXAMPLE / "data.jsonl"),
        "--model", str(tiny_model_dir), "--out", str(run), "--engine", "transformers",
        "--steps", "2", "--rows-per-step", "1", "--group-size", "2", "--lr", "1e-3",
        "--nproc-per-node", "2",
    ]  # fmt: skip
    before = set(descendant_pids(os.getpid()))
    assert main(argv) == 0
    assert left_behind(before, wait=0) == []  # no rank, launcher or engine process
    assert_two_steps_trained(run, tiny_model_dir)
    # AdamW's state: one DCP shard per rank
    shards = sorted(path.name for path in (run / "step-2" / "optimizer").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]
    # Resumed on one rank: the sharded checkpoint loads there (the weights and AdamW's state).
    assert main([*argv[:-2], "--steps", "3"]) == 0
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    batch = load_file(str(run / "rollouts" / "step-3" / "batch.safetensors"))
    assert {int(v) for v in batch["versions"][batch["loss_mask"].bool()]} == {2}


@pytest.mark.slow
def test_rltap_train_runs_under_torchrun(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The same program under torchrun's own ranks (what a run over several nodes starts on
    each): rltap train joins them instead of launching its own."""
    run = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    argv = [
        *torchrun, "--nproc-per-node", "2", "-m", "rltap.cli",
        "train", f"{EXAMPLE / 'agent.py'}:Agent", "--data", str(EXAMPLE / "data.jsonl"),
        "--model", str(tiny_model_dir), "--out", str(run), "--engine", "transformers",
        "--steps", "1", "--rows-per-step", "1", "--group-size", "2", "--lr", "1e-3",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(line["step"], line["version"]) for line in lines] == [(1, 1.0)]
    shards = sorted(path.name for path in (run / "step-1" / "optimizer").glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"]  # both of torchrun's ranks trained
