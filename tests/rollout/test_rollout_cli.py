"""`rltap rollout` as a user runs it: a real process over a JSONL dataset, its files read back."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from rltap.store.read import StoreReader
from rltap.testing.proxy import RunningProxy
from rltap.tree.links import derive_agent_id

# Row 3's agent raises: both its episodes fail, the other rows' succeed.
ROWS: list[dict[str, Any]] = [
    {"question": "question 0", "reward": 0.0},
    {"question": "question 1", "reward": 0.25},
    {"question": "question 2", "reward": 0.5},
    {"question": "question 3", "reward": 1.0, "fail": "raise"},
]
# A line: the row's place, then an exported interaction (rltap.record.exported) and its tokens.
LINE_FIELDS = {
    "row", "group", "episode", "session", "interaction_id", "parent_id", "link", "agent_id",
    "reward", "messages", "output_message_list", "output_text", "input_len", "output_len",
    "stop_reason", "logprob_convention", "constrained",
    "input_ids", "loss_mask", "logprobs", "versions",
}  # fmt: skip
BATCH_DTYPES = {
    "input_ids": torch.int32,
    "loss_mask": torch.int32,
    "logprobs": torch.float32,
    "versions": torch.int32,
    "attention_mask": torch.bool,
    "rewards": torch.float32,
}
CLI_TIMEOUT = 120.0


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RLTAP_ADMIN_KEY"}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _rollout_command(agent: str, data: Path, out: Path, *options: str) -> list[str]:
    return [
        sys.executable, "-m", "rltap.cli", "rollout", agent, "--data", str(data),
        "--out", str(out), "--group-size", "2", "--discount", "0.5", *options,
    ]  # fmt: skip


@dataclass
class Finished:
    returncode: int | None
    stdout: str
    stderr: str


async def _run(command: list[str], **env: str) -> Finished:
    """Run the CLI without blocking this event loop (the test proxy serves from it)."""
    process = await asyncio.create_subprocess_exec(
        *command, env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    async with asyncio.timeout(CLI_TIMEOUT):
        stdout, stderr = await process.communicate()
    return Finished(process.returncode, stdout.decode(), stderr.decode())


def _assert_lines_are_the_rows(lines: list[dict[str, Any]]) -> None:
    """Two episodes a row, two turns an episode; the number reward goes to the last reply."""
    assert all(set(line) == LINE_FIELDS for line in lines)
    assert {line["row"] for line in lines} == {0, 1, 2}
    for index, row in enumerate(ROWS[:3]):
        of_row = [line for line in lines if line["row"] == index]
        assert len(of_row) == 4
        assert {line["group"] for line in of_row} == {index}
        assert sorted(line["episode"] for line in of_row) == [0, 0, 1, 1]
        assert len({line["session"] for line in of_row}) == 2
        for line in of_row:
            turn = 0 if line["parent_id"] is None else 1
            assert line["output_text"] == f"Turn {turn}: you said: {row['question']} (turn {turn})"
            assert line["reward"] == pytest.approx(row["reward"] * (0.5 if turn == 0 else 1.0))
            n = len(line["input_ids"])
            assert len(line["loss_mask"]) == len(line["logprobs"]) == len(line["versions"]) == n
            assert 0 < sum(line["loss_mask"]) < n
    assert len({line["interaction_id"] for line in lines}) == len(lines)


@pytest.mark.slow
async def test_rollout_writes_training_data_and_resumes_after_an_interruption(
    proxy: RunningProxy,
    tiny_model_dir: Path,
    agent_spec: Callable[[str], str],
    tmp_path: Path,
) -> None:
    data = _write_rows(tmp_path / "data.jsonl", ROWS)
    out = tmp_path / "out"
    agent = agent_spec("ChatAgent")
    engine = ["--engine", "scripted", "--script", "rltap.testing.scripts:echo"]
    in_process = [*engine, "--model", str(tiny_model_dir), "--concurrency", "1"]

    # Its own engine and proxy; rows run one at a time, in order; the process dies in row 2.
    crashed = await _run(
        _rollout_command(agent, data, out, *in_process), CHAT_AGENT_EXIT_ON="question 2"
    )
    assert crashed.returncode == 3, crashed.stderr
    assert [entry["row"] for entry in _jsonl(out / "rows.jsonl")] == [0, 1]
    before = _jsonl(out / "trajectories.jsonl")
    assert {line["row"] for line in before} == {0, 1}
    # The in-process proxy kept its capture store in the run folder: every line's call is in it.
    reader = StoreReader(out)
    stored = {node.interaction_id: node for s in reader.sessions() for node in s.cache.values()}
    reader.close()
    for line in before:
        assert stored[line["interaction_id"]].token_sequence().input_ids == line["input_ids"]
    # A row's lines are written before its ledger entry: a crash in between leaves lines of a
    # row the ledger does not list, and a write cut short leaves a line without its newline.
    stray = {**before[-1], "row": 2, "session": "stray-session", "interaction_id": "stray"}
    with (out / "trajectories.jsonl").open("a") as handle:
        handle.write(json.dumps(stray) + "\n" + json.dumps(stray)[:40])
    with (out / "rows.jsonl").open("a") as handle:
        handle.write('{"row": 2, "episodes_ok": 2, "epis')

    # The rest against an already running proxy.
    remote = ["--proxy", proxy.url, "--admin-key", proxy.admin_key]
    resumed = await _run(_rollout_command(agent, data, out, *remote))
    assert resumed.returncode == 0, resumed.stderr
    assert "rltap rollout" in resumed.stdout
    assert "2 episodes failed; first: AgentBroke: agent broke on 'question 3'" in resumed.stderr
    assert proxy.state.store.open_sessions == 0

    ledger = _jsonl(out / "rows.jsonl")
    assert sorted(entry["row"] for entry in ledger) == [0, 1, 2, 3]
    failed = {entry["row"]: entry["episodes_failed"] for entry in ledger}
    assert failed == {0: 0, 1: 0, 2: 0, 3: 2}
    lines = _jsonl(out / "trajectories.jsonl")
    assert len(lines) == 12
    _assert_lines_are_the_rows(lines)
    assert [line for line in lines if line["row"] in (0, 1)] == before  # not run again
    assert "stray" not in {line["interaction_id"] for line in lines}

    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows"] == 4
    assert summary["rows_skipped"] == 2
    assert (summary["episodes_ok"], summary["episodes_failed"]) == (6, 2)
    assert summary["interactions"] == 12
    assert summary["generated_tokens"] == sum(sum(line["loss_mask"]) for line in lines)
    rewards = [line["reward"] for line in lines]
    assert summary["reward_mean"] == pytest.approx(sum(rewards) / len(rewards))

    batch = load_file(str(out / "batch.safetensors"))
    assert {key: tensor.dtype for key, tensor in batch.items()} == BATCH_DTYPES
    longest = max(len(line["input_ids"]) for line in lines)
    assert batch["input_ids"].shape == (12, longest)
    assert batch["rewards"].tolist() == pytest.approx(rewards)
    for index, line in enumerate(lines):
        n = len(line["input_ids"])
        assert batch["input_ids"][index, :n].tolist() == line["input_ids"]
        assert batch["loss_mask"][index, :n].tolist() == line["loss_mask"]
        assert int(batch["attention_mask"][index].sum()) == n


@pytest.mark.parametrize(
    "option",
    [
        pytest.param(["--group-size", "0"], id="group-size-0"),
        pytest.param(["--concurrency", "0"], id="concurrency-0"),
    ],
)
def test_rollout_refuses_nothing_to_run_at_once(
    tmp_path: Path, option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from rltap.cli.commands import main

    data = _write_rows(tmp_path / "data.jsonl", ROWS)
    arguments = ["rollout", "agent.py:Agent", "--data", str(data), "--out", str(tmp_path / "out")]
    # A refused value is a usage error, as for every command's settings (flags or --config).
    with pytest.raises(SystemExit) as exited:
        main([*arguments, "--proxy", "http://127.0.0.1:9", "--admin-key", "k", *option])
    assert exited.value.code == 2
    assert "--group-size and --concurrency must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
async def test_rollout_exports_the_agents_and_link_factors_asked_for(
    proxy: RunningProxy, agent_spec: Callable[[str], str], tmp_path: Path
) -> None:
    data = _write_rows(tmp_path / "data.jsonl", ROWS[1:3])
    out = tmp_path / "out"
    # The agent names no agent: its id is derived from its (empty) system prompt and tools.
    agent_id = derive_agent_id([], None)
    remote = ["--proxy", proxy.url, "--admin-key", proxy.admin_key]
    options = ["--agents", agent_id, "--link-factor", "prefix=0"]
    finished = await _run(_rollout_command(agent_spec("ChatAgent"), data, out, *remote, *options))
    assert finished.returncode == 0, finished.stderr
    lines = _jsonl(out / "trajectories.jsonl")
    assert len(lines) == 8
    assert {line["agent_id"] for line in lines} == {agent_id}
    for line in lines:
        # The second turn holds the row's reward; with a prefix factor 0 none reaches the first.
        first_turn = line["link"] == "root"
        assert line["reward"] == (0.0 if first_turn else ROWS[1 + line["row"]]["reward"])

    nobody = await _run(
        _rollout_command(agent_spec("ChatAgent"), data, tmp_path / "none", *remote, "--agents", "x")
    )
    assert nobody.returncode == 0, nobody.stderr
    assert _jsonl(tmp_path / "none" / "trajectories.jsonl") == []


def test_rollout_refuses_a_link_factor_without_its_kind(tmp_path: Path) -> None:
    from rltap.cli.commands import main

    arguments = ["rollout", "agent.py:Agent", "--data", "d", "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exited:
        main([*arguments, "--link-factor", "0.5"])
    assert exited.value.code == 2


@pytest.mark.slow
async def test_rollouts_with_the_same_seed_sample_the_same_tokens(
    tiny_model_dir: Path, agent_spec: Callable[[str], str], tmp_path: Path
) -> None:
    """The embedded engine samples (temperature 1) with the seeds derived from (--seed, row,
    episode, call). One episode at a time: in a batch, a row's fp32 logits move by ~1e-6 with
    what else is in it, enough to flip a draw from the random tiny model's nearly flat
    distribution over 151k tokens (a real model's peaked ones flip far more rarely)."""
    data = _write_rows(tmp_path / "data.jsonl", ROWS[:2])
    engine = ["--engine", "transformers", "--model", str(tiny_model_dir)]
    options = [*engine, "--default-max-tokens", "6", "--concurrency", "1", "--group-size", "1"]

    async def sampled(name: str, seed: str) -> dict[tuple[int, bool], list[int]]:
        out = tmp_path / name
        command = _rollout_command(agent_spec("ChatAgent"), data, out, *options, "--seed", seed)
        finished = await _run(command)
        assert finished.returncode == 0, finished.stderr
        lines = _jsonl(out / "trajectories.jsonl")
        assert len(lines) == 4
        return {(line["row"], line["parent_id"] is not None): line["input_ids"] for line in lines}

    first = await sampled("first", "5")
    assert first == await sampled("again", "5")
    assert first != await sampled("other", "6")
