"""Rollouts and training on a local Ray cluster (2 CPUs, started once for this module: a
module runs on one pytest-xdist worker, so there is one cluster), with rollout actors of the
tiny model or of instant vLLM servers (`rltap.testing.fakes.vllm`).

- `rltap rollout --ray`: episodes on two actors, each its own engine and proxy, written by the
  driver into the files of a local run; an actor killed mid-episode, a driver killed mid-run, a
  cluster left without actors, actors that cannot start, the missing extra;
- `ActorPool`'s dispatch on engine-less actors: least loaded first, bounded in flight, retries;
- `rltap train --ray`: after each update the weights reach every actor (embedded: Ray's object
  store; vLLM: each server reloads the saved shards through its development API) and all carry
  the new version before the next step's rollouts;
- placement of a server's actor on that server's node.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import ray
import torch
from pack_testing import pack_contents
from rich.console import Console
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rltap.cli.commands import build_parser, main
from rltap.config import RolloutConfig, from_namespace
from rltap.record.pack_io import load_packs
from rltap.rollout.batch import EpisodeData
from rltap.rollout.files import packs_from_lines
from rltap.rollout.ray import ActorInfo, ActorPool, NoLiveActors, ray_rollout
from rltap.rollout.ray.cluster import server_node

WAIT_SECONDS = 90.0
InstantVLLM = Callable[[Path | None], contextlib.AbstractContextManager[str]]


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
    # Every episode the killed actor had started and not finished ran again on the other one
    # (each of the 12 finished once).
    started = sum(e["event"] == "start" and e["pid"] == killed for e in events)
    finished = sum(e["event"] == "done" and e["pid"] == killed for e in events)
    assert started - finished >= 1
    survivors = {e["pid"] for e in events} - {killed}
    assert len(survivors) == 1
    done = [e for e in events if e["event"] == "done"]
    # Every episode finished; one whose agent finished on the killed actor just before the kill
    # never reached the driver, so it ran again (and was written once, checked above).
    assert {e["question"] for e in done} == {f"question {row}" for row in range(6)}
    rerun_after_done = len(done) - 12
    assert rerun_after_done >= 0
    # No actor held more than concurrency x group size = 2 episodes at once.
    in_flight = dict.fromkeys({e["pid"] for e in events}, 0)
    for event in events:
        in_flight[event["pid"]] += 1 if event["event"] == "start" else -1
        assert in_flight[event["pid"]] <= 2
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["episodes_ok"], summary["episodes_failed"]) == (12, 0)
    # Ran again: what the killed actor held, at most its 2 slots: its agents' unfinished
    # episodes, those finished but not yet handed back, and any not yet begun there.
    retried = summary["episodes_retried"]
    assert started - finished + rerun_after_done <= retried <= 2
    assert "rltap rollout" in stdout
    assert f"{retried} episodes ran again after losing their actor" in stderr


def _vllm_argv(argv: list[str], urls: list[str]) -> list[str]:
    """`argv` on the vLLM engine, one actor per server of `urls`."""
    argv = list(argv)
    argv[argv.index("scripted")] = "vllm"
    return [*argv, "--url", ",".join(urls)]


def test_a_driver_killed_mid_run_resumes_on_new_actors_without_duplicates(
    ray_address: str,
    ray_agent: Callable[[str], str],
    instant_vllm: InstantVLLM,
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
    """Actors of instant vLLM servers (`rltap.testing.fakes.vllm`): no model to load, every reply
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


def test_actors_hand_each_episodes_pack_back_to_the_driver(
    ray_address: str,
    ray_agent: Callable[[str], str],
    instant_vllm: InstantVLLM,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    data, record = _rows(tmp_path, 3)
    out = tmp_path / "out"
    argv = _argv(ray_agent("RecordingAgent"), data, out, tiny_model_dir, "--style", "tree")
    with instant_vllm(None) as first, instant_vllm(None) as second:
        argv = [*_vllm_argv(argv, [first, second]), "--ray", ray_address]
        config = from_namespace(RolloutConfig, build_parser().parse_args(argv))
        batch = asyncio.run(ray_rollout(config, Console(file=io.StringIO())))

    assert batch.summary.episodes_ok == 6
    assert len({e["pid"] for e in _jsonl(record)}) == 2  # both actors ran episodes
    # Each row's pack is its two episodes' packs, as the actors' proxies exported them,
    # merged on the driver: the packs crossed Ray, not only the lines.
    assert len(batch.packs) == 3
    for pack in batch.packs:
        assert len(pack.interaction_ids) == 4
        assert len(pack.leaves) == 2
    # ... and they agree with the lines, from which a resumed run would rebuild them (the
    # lines hold rewards as float32), and with the file the driver wrote.
    assert batch.lines == _jsonl(out / "trajectories.jsonl")
    rebuilt = packs_from_lines(batch.lines)
    assert [pack_contents(rebuilt[row]) for row in range(3)] == [
        pack_contents(p, float32_rewards=True) for p in batch.packs
    ]
    assert [pack_contents(p) for p in load_packs(out / "batch.safetensors")] == [
        pack_contents(p) for p in batch.packs
    ]


def test_a_cluster_left_without_actors_fails_with_a_clear_error(
    ray_address: str,
    ray_agent: Callable[[str], str],
    tiny_model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data, _ = _rows(tmp_path, 4, die=True)  # row 2's agent ends its actor's process
    out = tmp_path / "out"
    # The actor of a vLLM server (none listens there: the other rows' calls fail, quickly).
    argv = _argv(ray_agent("RecordingAgent"), data, out, tiny_model_dir)
    argv = _vllm_argv(argv, [f"http://127.0.0.1:{_closed_port()}"])
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--ray", ray_address])
    assert stopped.value.code == 2
    message = "rltap rollout: no live rollout actor left (all 1 of the run's are gone)"
    assert message in capsys.readouterr().err
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
    ray_address: str,
    ray_agent: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data, _ = _rows(tmp_path, 3)
    argv = ["rollout", ray_agent("RecordingAgent"), "--data", str(data), "--out",
            str(tmp_path / "out"), "--engine", "vllm", "--url", "http://127.0.0.1:9"]  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--ray", ray_address])
    assert stopped.value.code == 2
    assert (
        "rltap rollout: the rollout actors did not start: --tokenizer (or --model) must name "
        "a local tokenizer folder"
    ) in capsys.readouterr().err


def test_ray_takes_no_running_proxy(
    tmp_path: Path, ray_agent: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    data, _ = _rows(tmp_path, 3)
    argv = _argv(ray_agent("RecordingAgent"), data, tmp_path / "out", tmp_path, "--ray")
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--proxy", "http://127.0.0.1:8000", "--admin-key", "k"])
    assert stopped.value.code == 2
    assert "--ray starts a proxy in each rollout actor: it takes no --proxy" in (
        capsys.readouterr().err
    )


def test_without_ray_the_flag_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ray_agent: Callable[[str], str]
) -> None:
    data, _ = _rows(tmp_path, 3)
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets without the extra
    argv = _argv(ray_agent("RecordingAgent"), data, tmp_path / "out", tmp_path, "--ray")
    with pytest.raises(ImportError, match=r"pip install 'rltap\[ray\]'"):
        main(argv)


# --- ActorPool's dispatch ----------------------------------------------------------------


def _echo_actor() -> type:
    """The actor class, defined here so that Ray ships it by value (workers cannot import
    this test module by name)."""

    class EchoActor:
        """Runs an "episode" by sleeping `data` seconds (or ending its process when `data` is
        "die"); counts the episodes it holds at once."""

        def __init__(self) -> None:
            self.now = 0
            self.most = 0
            self.ran: list[int] = []

        async def run_episode(
            self, row: int, episode: int, data: Any, sampling: Any = None
        ) -> EpisodeData:
            if data == "die":
                os._exit(1)
            self.now += 1
            self.most = max(self.most, self.now)
            await asyncio.sleep(data)
            self.now -= 1
            self.ran.append(row)
            line = {"row": row, "episode": episode, "pid": os.getpid()}
            return EpisodeData(session_id=f"s-{row}-{episode}", lines=[line])

        def stats(self) -> tuple[int, list[int]]:
            return self.most, self.ran

    return EchoActor


@pytest.fixture
async def make_pool(ray_address: str) -> AsyncIterator[Callable[..., tuple[ActorPool, list[Any]]]]:
    """Pools of fresh `EchoActor`s (no CPU reserved: they only sleep), and their handles."""
    handles: list[Any] = []

    def make(actors: int, **options: Any) -> tuple[ActorPool, list[Any]]:
        remote = ray.remote(num_cpus=0, max_restarts=0)(_echo_actor())
        started = [remote.remote() for _ in range(actors)]
        handles.extend(started)
        infos = [ActorInfo(i, "node", f"http://actor-{i}", 0, 0) for i in range(actors)]
        return ActorPool(started, infos, style="individual", **options), started

    yield make
    for handle in handles:
        ray.kill(handle)


async def test_episodes_go_to_the_least_loaded_actor_and_never_beyond_its_bound(
    make_pool: Callable[..., tuple[ActorPool, list[Any]]],
) -> None:
    pool, handles = make_pool(2, per_actor=2, max_retries=0)
    results = await asyncio.gather(*(pool.run_episode(row, 0, 0.2) for row in range(8)))
    assert [r.lines[0]["row"] for r in results if r.lines] == list(range(8))
    stats = [await handle.stats.remote() for handle in handles]
    assert [most for most, _ in stats] == [2, 2]
    assert sum(len(ran) for _, ran in stats) == 8
    assert min(len(ran) for _, ran in stats) >= 2  # both took their 2 at the start
    assert all(r.retries == 0 for r in results)
    # With room to spare on each, episodes still spread: the least loaded actor goes first.
    roomy, handles = make_pool(2, per_actor=10, max_retries=0)
    await asyncio.gather(*(roomy.run_episode(row, 0, 0.2) for row in range(4)))
    assert [len((await handle.stats.remote())[1]) for handle in handles] == [2, 2]


async def test_a_lost_episode_runs_again_elsewhere_at_most_max_retries_times(
    make_pool: Callable[..., tuple[ActorPool, list[Any]]],
) -> None:
    pool, _ = make_pool(3, per_actor=4, max_retries=1)
    lost = await pool.run_episode(7, 1, "die")  # kills the actor it lands on, then the next one
    assert lost.lines is None
    assert lost.retries == 1
    assert lost.error is not None
    assert lost.error.startswith("lost with 2 rollout actors: ActorDiedError")
    assert len(pool.live) == 1
    survived = await pool.run_episode(8, 0, 0.0)  # the last actor still runs episodes
    assert survived.lines == [{"row": 8, "episode": 0, "pid": survived.lines[0]["pid"]}]
    with pytest.raises(NoLiveActors, match=r"no live rollout actor left \(all 3"):
        await pool.run_episode(9, 0, "die")
    with pytest.raises(NoLiveActors):
        await pool.run_episode(10, 0, 0.0)


# --- rltap train --ray -------------------------------------------------------------------


def _train_argv(agent: str, rows: int, tmp_path: Path, model: Path, *engine: str) -> list[str]:
    """2 steps of 2 rows x 2 episodes on 2 actors; rows that record their episodes' pids."""
    record = tmp_path / "record.jsonl"
    lines = [{"question": f"say something {i}", "record": str(record)} for i in range(rows)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return [
        "train", agent, "--data", str(data), "--model", str(model), "--out",
        str(tmp_path / "run"), "--steps", "2", "--rows-per-step", "2", "--group-size", "2",
        "--lr", "1e-2", *engine,
    ]  # fmt: skip


def _second_step_on_version_1_by_both_actors(tmp_path: Path) -> list[dict[str, Any]]:
    run = tmp_path / "run"
    metrics = _jsonl(run / "metrics.jsonl")
    assert [(m["step"], m["version"]) for m in metrics] == [(1, 1.0), (2, 2.0)]
    # Step 2 ran dataset rows 2 and 3 (its rows 0 and 1), every token generated by version 1.
    second = _jsonl(run / "rollouts" / "step-2" / "trajectories.jsonl")
    assert {line["row"] for line in second} == {0, 1}
    assert len(second) == 4
    for line in second:
        generated = [v for v, m in zip(line["versions"], line["loss_mask"], strict=True) if m]
        assert generated
        assert set(generated) == {1}
    events = _jsonl(tmp_path / "record.jsonl")
    pids = {e["pid"] for e in events if e["question"] in ("say something 2", "say something 3")}
    assert len(pids) == 2  # both actors ran step 2's episodes
    return second


def _max_logprob_diff(model: Any, lines: list[dict[str, Any]]) -> float:
    """The largest gap between the recorded logprobs and `model`'s own (T=1) of the replies."""
    worst = 0.0
    for line in lines:
        ids = torch.tensor([line["input_ids"]])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
        own = logprobs.gather(1, ids[0, 1:, None])[:, 0]
        for t, trained in enumerate(line["loss_mask"]):
            if trained:
                worst = max(worst, abs(own[t - 1].item() - line["logprobs"][t]))
    return worst


def test_each_update_reaches_every_embedded_actor_before_the_next_rollouts(
    ray_address: str, ray_agent: Callable[[str], str], tiny_model_dir: Path, tmp_path: Path
) -> None:
    argv = _train_argv(ray_agent("ShortReplyAgent"), 4, tmp_path, tiny_model_dir)
    engine = ["--engine", "transformers", "--ray", ray_address, "--replicas", "2"]
    assert main([*argv, *engine]) == 0

    second = _second_step_on_version_1_by_both_actors(tmp_path)
    # ... with the step-1 checkpoint's weights: its logprobs are the recorded ones, the
    # initial model's are not.
    checkpoint = tmp_path / "run" / "step-1"
    trained = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype="float32").eval()
    initial = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float32").eval()
    assert _max_logprob_diff(trained, second) <= 1e-5
    assert _max_logprob_diff(initial, second) > 1e-3


def test_a_lora_adapter_reaches_every_embedded_actor_before_the_next_rollouts(
    ray_address: str, ray_agent: Callable[[str], str], tiny_model_dir: Path, tmp_path: Path
) -> None:
    argv = _train_argv(ray_agent("ShortReplyAgent"), 4, tmp_path, tiny_model_dir)
    engine = ["--engine", "transformers", "--ray", ray_address, "--replicas", "2"]
    assert main([*argv, *engine, "--lora-rank", "4"]) == 0

    second = _second_step_on_version_1_by_both_actors(tmp_path)
    # The actors serve base + the step-1 adapter (Ray carried only the adapter's tensors).
    checkpoint = tmp_path / "run" / "step-1"
    assert (checkpoint / "adapter_config.json").is_file()
    trained = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype="float32").eval()
    initial = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float32").eval()
    assert _max_logprob_diff(trained, second) <= 1e-5
    assert _max_logprob_diff(initial, second) > 1e-3


def test_each_vllm_server_reloads_every_update_before_the_next_rollouts(
    ray_address: str,
    ray_agent: Callable[[str], str],
    instant_vllm: InstantVLLM,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    records = [tmp_path / "vllm-a.jsonl", tmp_path / "vllm-b.jsonl"]
    with instant_vllm(records[0]) as first, instant_vllm(records[1]) as second:
        argv = _train_argv(ray_agent("ShortReplyAgent"), 4, tmp_path, tiny_model_dir)
        engine = ["--engine", "vllm", "--url", f"{first},{second}", "--ray", ray_address]
        assert main([*argv, *engine]) == 0

    _second_step_on_version_1_by_both_actors(tmp_path)
    folder = str((tmp_path / "run" / "sync").resolve())
    for record in records:
        requests = _jsonl(record)
        # One reload per update on each server, from the shards saved once into RUN/sync.
        expected = []
        for version in ("1", "2"):
            expected += [
                ("GET", "/is_paused", {}, None),
                ("POST", "/pause", {"mode": "wait"}, {}),
                ("POST", "/collective_rpc", {},
                 {"method": "reload_weights", "kwargs": {"weights_path": folder}}),
                ("POST", "/reset_prefix_cache", {}, {}),
                ("POST", "/update_weight_version", {}, {"new_version": version}),
                ("POST", "/resume", {}, {}),
            ]  # fmt: skip
        assert [(r["method"], r["path"], r["query"], r["body"]) for r in requests] == expected
        reloads = [r for r in requests if r["path"] == "/collective_rpc"]
        assert all({"config.json", "model.safetensors"} <= set(r["files"]) for r in reloads)


# --- placement ---------------------------------------------------------------------------


def test_a_server_is_placed_on_its_node(ray_address: str) -> None:
    here = ray.get_runtime_context().get_node_id()
    node_ip = ray.util.get_node_ip_address()
    assert server_node("http://127.0.0.1:8000") == here  # loopback: the driver's node
    assert server_node(f"http://{node_ip}:8000") == here
    assert server_node("http://192.0.2.77:8000") is None  # no Ray node there
    assert server_node("http://no-such-host.invalid:8000") is None
