"""`rltap train`'s training data takes one road: the packs the proxy exports reach the trainer
in memory, token for token; the step's files are written from them, not read back."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pack_testing import pack_contents

import rltap.proxy.control
from rltap.cli.commands import main
from rltap.record.pack import TreePack
from rltap.record.pack_io import load_packs
from rltap.rollout.files import BATCH, load_trajectories
from rltap.train.trainer import PolicyTrainer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_toy"
AGENT = f"{EXAMPLE / 'agent.py'}:Agent"


@pytest.mark.slow
def test_the_trainer_steps_on_the_packs_the_proxy_exported(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exported: list[TreePack] = []
    trained: list[list[TreePack]] = []
    encode_pack = rltap.proxy.control.encode_pack
    step = PolicyTrainer.step

    def export(pack: TreePack) -> dict[str, Any]:
        exported.append(copy.deepcopy(pack))  # as the proxy put it on the wire
        return encode_pack(pack)

    def train(trainer: PolicyTrainer, packs: Sequence[TreePack], version: int) -> Any:
        trained.append(copy.deepcopy(list(packs)))  # before the step fills in advantages
        return step(trainer, packs, version)

    monkeypatch.setattr(rltap.proxy.control, "encode_pack", export)
    monkeypatch.setattr(PolicyTrainer, "step", train)
    run = tmp_path / "run"
    argv = [
        "train", AGENT, "--data", str(EXAMPLE / "data.jsonl"), "--model", str(tiny_model_dir),
        "--out", str(run), "--engine", "transformers", "--steps", "1", "--rows-per-step", "2",
        "--group-size", "1",
    ]  # fmt: skip
    assert main(argv) == 0

    # One episode a row: each row's pack is its one session's export, unchanged.
    (packs,) = trained
    assert len(exported) == len(packs) == 2
    by_ids = {tuple(pack.interaction_ids): pack_contents(pack) for pack in exported}
    assert [by_ids[tuple(pack.interaction_ids)] for pack in packs] == [
        pack_contents(pack) for pack in packs
    ]
    # The step's files hold the same data, written from it for inspection and resume.
    step_dir = run / "rollouts" / "step-1"
    assert [pack_contents(p) for p in load_packs(step_dir / BATCH)] == [
        pack_contents(p) for p in packs
    ]
    lines = load_trajectories(step_dir)
    assert sorted(line["interaction_id"] for line in lines) == sorted(
        i for pack in packs for i in pack.interaction_ids
    )
