"""A training run's folder (rltap.train.run_dir): metrics.jsonl and TensorBoard read back, the
reward plot, checkpoints that Hugging Face loads, the optimizer state, and resuming."""

from __future__ import annotations

import copy
import functools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rltap.train import METRICS, REWARD_PLOT, TENSORBOARD, Checkpoint, RunDir
from rltap.train.gather import load_optimizer_state, save_optimizer_state
from rltap.train.run_dir import PLOT_DPI, PLOT_INCHES


def step_metrics(step: int, offset: float = 0.0) -> dict[str, float]:
    return {
        "reward_mean": 0.1 * step + offset,
        "reward_std": 0.05,
        "kl": 0.01 * step,
        "tokens": 100 * step,
        "version": step,
    }


def tensorboard_scalars(run: Path, tag: str) -> list[tuple[int, float]]:
    """What TensorBoard shows for `tag`: (step, value), orphaned events of a restart purged."""
    events = EventAccumulator(str(run / TENSORBOARD))
    events.Reload()
    return [(event.step, event.value) for event in events.Scalars(tag)]


def test_log_writes_metrics_jsonl_and_tensorboard(tmp_path: Path) -> None:
    with RunDir(tmp_path / "run") as run:
        for step in (1, 2, 3):
            run.log(step, step_metrics(step))
        # Flushed at each log: readable while the writer is still open.
        lines = (run.path / METRICS).read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == [
            {"step": step, **step_metrics(step)} for step in (1, 2, 3)
        ]
        assert run.metrics() == [{"step": step, **step_metrics(step)} for step in (1, 2, 3)]
        for tag in ("reward_mean", "kl", "tokens", "version"):
            assert tensorboard_scalars(run.path, tag) == [
                (step, pytest.approx(step_metrics(step)[tag])) for step in (1, 2, 3)
            ]
        # numpy and torch scalars, as a loop has them, are written as JSON numbers.
        run.log(4, {"loss": torch.tensor(0.5), "grad_norm": np.float32(2.0), "tokens": np.int64(7)})
        assert run.metrics()[-1] == {"step": 4, "loss": 0.5, "grad_norm": 2.0, "tokens": 7}
        assert type(run.metrics()[-1]["tokens"]) is int
        with pytest.raises(ValueError, match="'step'"):
            run.log(4, {"step": 4.0})


def test_a_line_cut_short_by_a_kill_is_not_a_step(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.log(1, step_metrics(1))
    with (tmp_path / METRICS).open("a", encoding="utf-8") as handle:
        handle.write('{"step": 2, "reward_me')
    assert [row["step"] for row in run.metrics()] == [1]
    run.close()


def test_reward_plot_is_a_png_of_the_plotted_size(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    for step in range(1, 6):
        run.log(step, step_metrics(step))
    path = run.plot_rewards()
    run.close()
    assert path == tmp_path / REWARD_PLOT
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    pixels = matplotlib.image.imread(path)
    width, height = (round(inches * PLOT_DPI) for inches in PLOT_INCHES)
    assert pixels.shape == (height, width, 4)
    # Something was drawn: more than the background and the axes' black.
    assert len({tuple(pixel) for pixel in pixels.reshape(-1, 4)[::97].tolist()}) > 3


def optimizer_saver(model: Any, optimizer: torch.optim.Optimizer) -> Any:
    """What `save_checkpoint` takes to write `optimizer`'s state (DCP shards, one here)."""
    return functools.partial(save_optimizer_state, model, optimizer)


def trained_copy(model: Any) -> tuple[Any, torch.optim.AdamW]:
    """A copy of the shared tiny model after one AdamW step on its transformer layers (the
    embedding's state would make the checkpoint 150 MB bigger and test nothing more)."""
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(model.model.layers.parameters(), lr=1e-3)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    return model, optimizer


def test_checkpoint_loads_with_from_pretrained_and_restores_the_optimizer(
    tmp_path: Path, tiny_model: Any, qwen_tokenizer: Any
) -> None:
    from transformers import AutoModelForCausalLM

    model, optimizer = trained_copy(tiny_model)
    run = RunDir(tmp_path)
    state = {"version": 1, "step": 1, "rng": [1, 2, 3], "config": {"lr": 1e-3}}
    saved = run.save_checkpoint(1, model, qwen_tokenizer, optimizer_saver(model, optimizer), state)
    assert saved == Checkpoint(step=1, path=tmp_path / "step-1", state=state)
    assert run.last_checkpoint() == saved

    loaded = AutoModelForCausalLM.from_pretrained(str(saved.path), dtype="float32")
    expected = model.state_dict()
    assert sorted(loaded.state_dict()) == sorted(expected)
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    # The tokenizer is saved beside the weights (loading it back, 2 s, tests transformers).
    names = {path.name for path in saved.path.iterdir()}
    assert {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "optimizer"} <= names

    again = copy.deepcopy(tiny_model)
    fresh = torch.optim.AdamW(again.model.layers.parameters(), lr=1e-3)
    load_optimizer_state(again, fresh, saved.optimizer_path)
    before, after = optimizer.state_dict(), fresh.state_dict()
    assert after["param_groups"] == before["param_groups"]
    assert sorted(after["state"]) == sorted(before["state"]) != []
    for index, moments in before["state"].items():
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(after["state"][index][key], moments[key]), (index, key)


class FailingTokenizer:
    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "tokenizer.json").write_text("{", encoding="utf-8")
        msg = "No space left on device"
        raise OSError(msg)


def test_last_checkpoint_is_the_highest_complete_one(tmp_path: Path, tiny_model: Any) -> None:
    run = RunDir(tmp_path)
    optimizer = optimizer_saver(tiny_model, torch.optim.AdamW([tiny_model.model.norm.weight]))
    assert run.last_checkpoint() is None
    for step in (1, 10, 2):  # by number, not by name or by time
        run.save_checkpoint(step, tiny_model, FakeTokenizer(), optimizer, {"version": step})
    # What a run killed while saving step 11 leaves (the layout in run_dir's docstring).
    leftover = tmp_path / ".step-11.partial"
    leftover.mkdir()
    (leftover / "config.json").write_text("{}", encoding="utf-8")
    last = run.last_checkpoint()
    assert last is not None
    assert (last.step, last.path, last.state) == (10, tmp_path / "step-10", {"version": 10})
    assert not leftover.exists()
    # An error mid-save leaves no partial folder and the last checkpoint as it was.
    with pytest.raises(OSError, match="No space"):
        run.save_checkpoint(12, tiny_model, FailingTokenizer(), optimizer, {"version": 12})
    assert run.last_checkpoint() == last
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step-1", "step-10", "step-2"]
    with pytest.raises(TypeError):  # state must be JSON: refused before anything is written
        run.save_checkpoint(13, tiny_model, FakeTokenizer(), optimizer, {"rng": torch.zeros(2)})
    assert not (tmp_path / ".step-13.partial").exists()

    # Saved again, a step's folder is replaced whole; a kill between moving the old one aside and
    # renaming the new one in leaves the old one, which last_checkpoint puts back.
    again = run.save_checkpoint(10, tiny_model, FakeTokenizer(), optimizer, {"version": 100})
    assert run.last_checkpoint() == again != last
    (tmp_path / "step-10").rename(tmp_path / ".step-10.stale")
    (tmp_path / ".step-10.partial").mkdir()
    assert run.last_checkpoint() == again
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step-1", "step-10", "step-2"]


class FakeTokenizer:
    """Enough of a tokenizer for checkpoints whose tokenizer the test does not read."""

    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "tokenizer_config.json").write_text("{}", encoding="utf-8")


def test_resume_drops_what_came_after_the_checkpoint(tmp_path: Path, tiny_model: Any) -> None:
    optimizer = optimizer_saver(tiny_model, torch.optim.AdamW([tiny_model.model.norm.weight]))
    run = RunDir(tmp_path)
    for step in (1, 2, 3, 4):
        run.log(step, step_metrics(step))
        (run.rollout_dir(step) / "batch.safetensors").write_bytes(b"x")
        if step in (2, 3):
            run.save_checkpoint(step, tiny_model, FakeTokenizer(), optimizer, {"version": step})
    run.close()  # the process ends; a new one resumes from step 2 (say step-3 was unwanted)

    resumed = RunDir(tmp_path)
    checkpoint = resumed.checkpoints()[0]
    assert checkpoint.step == 2
    resumed.resume_from(checkpoint)
    assert [row["step"] for row in resumed.metrics()] == [1, 2]
    assert sorted(path.name for path in (tmp_path / "rollouts").iterdir()) == ["step-1", "step-2"]
    assert resumed.last_checkpoint() == checkpoint
    # TensorBoard orders a run's event files by name: the second they were opened, then the
    # process and a per-process counter. A real restart is another process, seconds later; in
    # this one process the same second would leave the order to that counter (".10" sorts
    # before ".9"), so the resumed writer opens a second later, as a restart's would.
    time.sleep(1.1)
    for step in (3, 4):
        resumed.log(step, step_metrics(step, offset=1.0))
    resumed.close()

    expected = [step_metrics(1), step_metrics(2), step_metrics(3, 1.0), step_metrics(4, 1.0)]
    assert resumed.metrics() == [{"step": n, **row} for n, row in enumerate(expected, start=1)]
    assert tensorboard_scalars(tmp_path, "reward_mean") == [
        (n, pytest.approx(row["reward_mean"])) for n, row in enumerate(expected, start=1)
    ]

    # Resuming with no checkpoint starts over.
    again = RunDir(tmp_path)
    again.resume_from(None)
    time.sleep(1.1)  # a later process's writer, as above
    again.log(1, step_metrics(1, offset=2.0))
    again.close()
    assert again.metrics() == [{"step": 1, **step_metrics(1, offset=2.0)}]
    assert tensorboard_scalars(tmp_path, "reward_mean") == [
        (1, pytest.approx(step_metrics(1, offset=2.0)["reward_mean"]))
    ]
    assert not (tmp_path / "rollouts" / "step-1").exists()
    assert again.last_checkpoint() is None


def test_rollout_and_sync_folders_are_created(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "new" / "run")
    assert run.rollout_dir(3) == tmp_path / "new" / "run" / "rollouts" / "step-3"
    assert run.rollout_dir(3).is_dir()
    assert run.sync_dir() == tmp_path / "new" / "run" / "sync"
    assert run.sync_dir().is_dir()
