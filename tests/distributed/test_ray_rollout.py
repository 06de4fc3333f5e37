"""`rltap rollout --ray`: episodes on two rollout actors (each its own engine and proxy) of a
local Ray cluster, written by the driver into the files of a local run; an actor killed
mid-episode, a driver killed mid-run, and a cluster left without actors."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from rltap.cli import main

WAIT_SECONDS = 90.0


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _rows(tmp_path: Path, count: int, **extra: Any) -> tuple[Path, Path]:
    """`count` rows (row 2 gets `extra`), and the agents' record file."""
    record = tmp_path / "record.jsonl"
    rows = [
        {"question": f"question {i}", "reward": i / 10, "record": str(record)} for i in range(count)
    ]
    rows[2].update(extra)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data, record


def _argv(agent: str, data: Path, out: Path, model: Path, *options: str) -> list[str]:
    return [
        "rollout", agent, "--data", str(data), "--out", str(out), "--group-size", "2",
        "--engine", "scripted", "--script", "rltap.testing.scripts:echo", "--model", str(model),
        "--concurrency", "1", *options,
    ]  # fmt: skip


def _driver(argv: list[str], address: str, replicas: int = 2) -> subprocess.Popen[str]:
    """`rltap rollout ... --ray ADDRESS` as its own process, joining the test's cluster."""
    ray = ["--ray", address, "--replicas", str(replicas)]
    command = [sys.executable, "-m", "rltap.cli", *argv, *ray]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, process: subprocess.Popen[str] | None = None) -> int:
    """The pid written into `path` once it is there."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not (path.exists() and path.read_text()):
        if process is not None and process.poll() is not None:
            pytest.fail(f"the driver ended first: {process.communicate()}")
        assert time.monotonic() < deadline, f"nothing wrote {path}"
        time.sleep(0.1)
    return int(path.read_text())


def _echoed(row: int, turn: int) -> str:
    """The echo script's reply to turn `turn` of row `row`."""
    return f"Turn {turn}: you said: question {row} (turn {turn})"


def _assert_each_episode_once(
    out: Path, rows: int, reply: Callable[[int, int], str] = _echoed
) -> list[dict[str, Any]]:
    """Two episodes a row, two turns an episode (`reply(row, turn)` each), each line once."""
    lines = _jsonl(out / "trajectories.jsonl")
    assert sorted(entry["row"] for entry in _jsonl(out / "rows.jsonl")) == list(range(rows))
    assert len(lines) == rows * 4
    assert len({line["interaction_id"] for line in lines}) == len(lines)
    for row in range(rows):
        of_row = [line for line in lines if line["row"] == row]
        assert sorted(line["episode"] for line in of_row) == [0, 0, 1, 1]
        assert len({line["session"] for line in of_row}) == 2
        for line in of_row:
            turn = 0 if line["parent_id"] is None else 1
            assert line["output_text"] == reply(row, turn)
            assert line["reward"] == pytest.approx(row / 10)
    return lines


def test_an_actor_killed_mid_episode_loses_nothing_and_nothing_is_written_twice(
    ray_address: str, ray_agent: Callable[[str], str], tiny_model_dir: Path, tmp_path: Path
) -> None:
    hold = tmp_path / "hold.pid"
    data, record = _rows(tmp_path, 6, hold=str(hold))
    out = tmp_path / "out"
    argv = _argv(ray_agent("RecordingAgent"), data, out, tiny_model_dir)
    driver = _driver(argv, ray_address)
    killed = _wait_for(hold, driver)  # the actor holding row 2's first episode
    os.kill(killed, signal.SIGKILL)
    stdout, stderr = driver.communicate(timeout=WAIT_SECONDS)
    assert driver.returncode == 0, stderr

    _assert_each_episode_once(out, 6)
    events = _jsonl(record)
    # Every episode the killed actor had started and not finished ran again on the other one.
    started = sum(e["event"] == "start" and e["pid"] == killed for e in events)
    finished = sum(e["event"] == "done" and e["pid"] == killed for e in events)
    assert started - finished >= 1
    survivors = {e["pid"] for e in events} - {killed}
    assert len(survivors) == 1
    done = [e for e in events if e["event"] == "done"]
    assert len(done) == 12
    # No actor held more than concurrency x group size = 2 episodes at once.
    in_flight = dict.fromkeys({e["pid"] for e in events}, 0)
    for event in events:
        in_flight[event["pid"]] += 1 if event["event"] == "start" else -1
        assert in_flight[event["pid"]] <= 2
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["episodes_ok"], summary["episodes_failed"]) == (12, 0)
    assert summary["episodes_retried"] == started - finished
    assert "rltap rollout" in stdout
    assert f"{started - finished} episodes ran again after losing their actor" in stderr


def _vllm_argv(argv: list[str], urls: list[str]) -> list[str]:
    """`argv` on the vLLM engine, one actor per server of `urls`."""
    argv = list(argv)
    argv[argv.index("scripted")] = "vllm"
    return [*argv, "--url", ",".join(urls)]


def test_a_driver_killed_mid_run_resumes_on_new_actors_without_duplicates(
    ray_address: str,
    ray_agent: Callable[[str], str],
    instant_vllm: Callable[[Path | None], contextlib.AbstractContextManager[str]],
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    with instant_vllm(None) as first, instant_vllm(None) as second:
        _resume_after_the_driver_died(
            ray_address, ray_agent("RecordingAgent"), [first, second], tiny_model_dir, tmp_path
        )


def _resume_after_the_driver_died(
    address: str, agent: str, urls: list[str], model: Path, tmp_path: Path
) -> None:
    """Actors of instant vLLM servers (bench/fake_vllm.py): no model to load, every reply
    'Hello from the instant engine.'."""
    hold = tmp_path / "hold.pid"
    data, record = _rows(tmp_path, 5, hold=str(hold))
    out = tmp_path / "out"
    argv = _argv(agent, data, out, model)
    driver = _driver(_vllm_argv(argv, urls[:1]), address, replicas=1)
    _wait_for(hold, driver)
    driver.kill()  # the driver dies; Ray ends the actors it owned
    driver.communicate(timeout=WAIT_SECONDS)
    before = _jsonl(out / "trajectories.jsonl")
    done_before = sorted(entry["row"] for entry in _jsonl(out / "rows.jsonl"))
    assert done_before  # row 2 starts only once a row is written
    assert 2 not in done_before
    record.unlink()

    # Again in this process, on two actors, its agents now in their subprocess workers.
    argv = _vllm_argv([*argv, "--mode", "subproc"], urls)
    assert main([*argv, "--ray", address]) == 0

    lines = _assert_each_episode_once(out, 5, lambda row, turn: "Hello from the instant engine.")
    kept = [line for line in lines if line["row"] in done_before]
    assert kept == [line for line in before if line["row"] in done_before]  # not run again
    events = _jsonl(record)
    assert {e["question"] for e in events} == {f"question {r}" for r in range(5)} - {
        f"question {r}" for r in done_before
    }
    assert {e["via"] for e in events} == {"env"}
    actors = {e["ppid"] for e in events}
    assert len(actors) == 2  # both actors' workers ran episodes
    assert os.getpid() not in actors
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rows_skipped"] == len(done_before)
    assert (summary["episodes_ok"], summary["episodes_retried"]) == (10, 0)
    assert summary["interactions"] == 20
    batch = load_file(str(out / "batch.safetensors"))
    assert batch["input_ids"].dtype == torch.int32
    assert batch["input_ids"].shape == (20, max(len(line["input_ids"]) for line in lines))
    assert batch["rewards"].tolist() == pytest.approx([line["reward"] for line in lines])


def test_a_cluster_left_without_actors_fails_with_a_clear_error(
    ray_address: str, ray_agent: Callable[[str], str], tiny_model_dir: Path, tmp_path: Path
) -> None:
    data, _ = _rows(tmp_path, 4, die=True)  # row 2's agent ends its actor's process
    out = tmp_path / "out"
    # The actor of a vLLM server (none listens there: the other rows' calls fail, quickly).
    argv = _argv(ray_agent("RecordingAgent"), data, out, tiny_model_dir)
    argv = _vllm_argv(argv, [f"http://127.0.0.1:{_closed_port()}"])
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--ray", ray_address])
    message = "rltap rollout: no live rollout actor left (all 1 of the run's are gone)"
    assert str(stopped.value) == message
    # Rows 0 and 1 ran first (one at a time), their episodes failed on the engine; nothing of
    # row 2 reached the files.
    ledger = _jsonl(out / "rows.jsonl")
    assert [(e["row"], e["episodes_failed"]) for e in ledger] == [(0, 2), (1, 2)]
    assert _jsonl(out / "trajectories.jsonl") == []


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_actors_that_cannot_start_say_why(
    ray_address: str, ray_agent: Callable[[str], str], tmp_path: Path
) -> None:
    data, _ = _rows(tmp_path, 3)
    argv = ["rollout", ray_agent("RecordingAgent"), "--data", str(data), "--out",
            str(tmp_path / "out"), "--engine", "vllm", "--url", "http://127.0.0.1:9"]  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--ray", ray_address])
    assert str(stopped.value) == (
        "rltap rollout: the rollout actors did not start: --tokenizer (or --model) must name "
        "a local tokenizer folder"
    )


def test_ray_takes_no_running_proxy(tmp_path: Path, ray_agent: Callable[[str], str]) -> None:
    data, _ = _rows(tmp_path, 3)
    argv = _argv(ray_agent("RecordingAgent"), data, tmp_path / "out", tmp_path, "--ray")
    with pytest.raises(SystemExit, match="it takes no --proxy"):
        main([*argv, "--proxy", "http://127.0.0.1:8000", "--admin-key", "k"])


def test_without_ray_the_flag_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ray_agent: Callable[[str], str]
) -> None:
    data, _ = _rows(tmp_path, 3)
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets without the extra
    argv = _argv(ray_agent("RecordingAgent"), data, tmp_path / "out", tmp_path, "--ray")
    with pytest.raises(ImportError, match=r"pip install 'rltap\[ray\]'"):
        main(argv)
