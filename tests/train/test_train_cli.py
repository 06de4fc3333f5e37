"""`rltap train` end to end on the tiny model and the toy task: the run folder (metrics.jsonl,
TensorBoard events, reward.png, step-N/ checkpoints that from_pretrained loads), tokens stamped
with the version of the weights that generated them, resuming on the same folder, a YAML
config file, --async with --algo ppo, a LoRA run (--lora-rank: adapter checkpoints, resumed),
and the flags' errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from rltap.cli.commands import main
from rltap.store.read import StoreReader
from rltap.train import RunDir

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_toy"
AGENT = f"{EXAMPLE / 'agent.py'}:Agent"
METRIC_KEYS = {
    "reward_mean", "reward_std", "kl", "entropy", "clip_fraction", "tokens", "stale_tokens",
    "rollout_seconds", "train_seconds", "sync_seconds", "loss", "grad_norm", "version",
}  # fmt: skip


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def versions_of(run: Path, step: int) -> set[int]:
    """The policy versions the tokens of step `step`'s rollouts carry."""
    batch = load_file(str(run / "rollouts" / f"step-{step}" / "batch.safetensors"))
    generated = batch["loss_mask"].bool()
    return {int(v) for v in batch["versions"][generated]}


@pytest.mark.slow
def test_a_run_writes_its_folder_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = tmp_path / "run.yaml"
    config.write_text(
        f"agent: {AGENT}\ndata: {EXAMPLE / 'data.jsonl'}\nmodel: {tiny_model_dir}\n"
        f"out: {run}\nengine: transformers\nrows-per-step: 1\ngroup_size: 4\nlr: 1.0e-3\n"
    )
    assert main(["train", "--config", str(config), "--steps", "2"]) == 0
    lines = metrics(run)
    assert [line["step"] for line in lines] == [1, 2]
    assert all(line.keys() >= METRIC_KEYS for line in lines)
    assert [versions_of(run, step) for step in (1, 2)] == [{0}, {1}]
    assert list((run / "tensorboard").iterdir())
    assert (run / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert main(["train", "--config", str(config), "--steps", "3"]) == 0  # resumes after step-2
    assert [line["step"] for line in metrics(run)] == [1, 2, 3]
    assert metrics(run)[:2] == lines
    assert versions_of(run, 3) == {2}
    # The run folder keeps the proxy's capture store across the resume: every step's episodes.
    reader = StoreReader(run)
    sessions = reader.summaries()
    reader.close()
    assert len(sessions) == 3 * 4
    assert sorted({s.max_version for s in sessions}) == [0, 1, 2]
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(run / "step-3"))
    assert model.config.vocab_size > 0
    assert main(["train", "--config", str(config), "--steps", "3"]) == 0  # nothing left to do
    assert len(metrics(run)) == 3


@pytest.mark.slow
def test_async_ppo_trains_on_tokens_at_most_one_version_old(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    argv = [
        "train", AGENT, "--data", str(EXAMPLE / "data.jsonl"), "--model", str(tiny_model_dir),
        "--out", str(run), "--engine", "transformers", "--steps", "3", "--rows-per-step", "2",
        "--group-size", "2", "--async", "--algo", "ppo", "--minibatches", "2", "--kl-coef",
        "0.05", "--save-every", "3",
    ]  # fmt: skip
    assert main(argv) == 0
    lines = metrics(run)
    assert [line["version"] for line in lines] == [1, 2, 3]
    assert all(line["stale_tokens"] == 0 for line in lines)
    # step 2's rollouts started with step 1's training, on version 0 (a synchronous run's are
    # all version 1); the sync may land mid-way
    assert 0 in versions_of(run, 2) <= {0, 1}
    assert 1 in versions_of(run, 3) <= {1, 2}
    assert all(line["kl"] >= 0 for line in lines)
    assert [p.name for p in run.glob("step-*")] == ["step-3"]


def test_a_step_whose_episodes_all_fail_stops_the_run_with_their_error(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = tmp_path / "broken.py"
    agent.write_text(
        "class Agent:\n    async def run(self, data, **kwargs):\n"
        "        raise ValueError('no reply today')\n"
    )
    argv = [
        "train", f"{agent}:Agent", "--data", str(EXAMPLE / "data.jsonl"), "--model",
        str(tiny_model_dir), "--out", str(tmp_path / "run"), "--engine", "transformers",
        "--rows-per-step", "1", "--group-size", "2",
    ]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "step 1: all 2 episodes failed" in err
    assert "ValueError: no reply today" in err
    assert RunDir(tmp_path / "run").metrics() == []  # no step recorded


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "2"], "missing AGENT, --data, --model, --out"),
        ([AGENT, "--data", "d", "--model", "m", "--out", "o", "--async", "--max-staleness", "0"],
         "--max-staleness >= 1"),
        ([AGENT, "--data", "d", "--model", "m", "--out", "o", "--steps", "0"],
         "--steps must be at least 1"),
    ],
)  # fmt: skip
def test_flag_errors_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unknown_config_key_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.toml"
    config.write_text('agent = "a:A"\nlearning_rate = 0.1\n')
    with pytest.raises(SystemExit):
        main(["train", "--config", str(config)])
    assert "unknown keys ['learning_rate']" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_every_scores_the_held_out_rows_before_and_during_the_run(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text('{"prompt": "Write one word."}\n{"prompt": "Say hello."}\n')
    argv = [
        "train", AGENT, "--data", str(EXAMPLE / "data.jsonl"), "--model", str(tiny_model_dir),
        "--out", str(run), "--engine", "transformers", "--steps", "3", "--rows-per-step", "1",
        "--group-size", "2", "--eval-data", str(held_out), "--eval-every", "2",
        "--eval-samples", "2", "--pass-threshold", "0.5", "--save-every", "3",
    ]  # fmt: skip
    assert main(argv) == 0
    lines = metrics(run)
    assert [line["step"] for line in lines] == [0, 1, 2, 3]
    eval_keys = {"eval_reward", "eval_reward_std", "eval_pass_at_1", "eval_seconds"}
    assert set(lines[0]) == {"step", *eval_keys}  # before the first update: the score only
    assert "eval_reward" not in lines[1]
    assert all(line.keys() >= METRIC_KEYS | eval_keys for line in lines[2:])  # every 2, last
    for line in (lines[0], lines[2], lines[3]):
        step = line["step"]
        scored = json.loads((run / "eval" / f"step-{step}" / "eval.json").read_text())
        assert scored["rows"] == 2
        assert scored["samples"] == 2
        assert scored["temperature"] == 0.0  # greedy unless --eval-temperature
        assert line["eval_reward"] == pytest.approx(scored["reward_mean"])
        assert line["eval_pass_at_1"] == pytest.approx(scored["pass_at_k"]["1"])
        # The held-out rows are the eval's own: the episodes answered their prompts.
        prompts = {
            t["messages"][0]["content"]
            for t in map(json.loads, (run / "eval" / f"step-{step}" / "trajectories.jsonl").open())
        }
        assert prompts == {"Write one word.", "Say hello."}
    # Greedy and the weights unchanged between two samples: both samples of a row agree.
    assert all(len(set(row["rewards"])) == 1 for row in scored["per_row"])
    assert "eval" in capsys.readouterr().out  # the table's column
    assert (run / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_lora_run_trains_and_checkpoints_the_adapter_and_resumes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    args = [
        "train", AGENT, "--data", str(EXAMPLE / "data.jsonl"), "--model", str(tiny_model_dir),
        "--out", str(run), "--engine", "transformers", "--rows-per-step", "1",
        "--group-size", "4", "--lr", "1e-2", "--kl-coef", "0.05",
    ]  # fmt: skip
    lora = ["--lora-rank", "4"]
    assert main([*args, *lora, "--steps", "2"]) == 0
    assert [versions_of(run, step) for step in (1, 2)] == [{0}, {1}]
    files = {p.name for p in (run / "step-2").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer"} <= files
    assert "model.safetensors" not in files
    adapter = json.loads((run / "step-2" / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"]) == (4, 8)
    assert adapter["base_model_name_or_path"] == str(tiny_model_dir.resolve())
    assert all(line["kl"] >= 0 for line in metrics(run))
    assert main([*args, *lora, "--steps", "3"]) == 0  # resumes: the adapter onto --model again
    assert [line["step"] for line in metrics(run)] == [1, 2, 3]
    assert versions_of(run, 3) == {2}
    # A whole-model run cannot resume on an adapter's run folder.
    assert main([*args, "--steps", "4"]) == 1
