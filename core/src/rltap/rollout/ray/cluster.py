"""Connecting to Ray and placing the rollout actors: one per embedded engine replica, or one
per engine server, on that server's node when Ray knows it.

Ray is the `rltap[ray]` extra and is imported only here, when `--ray` is used.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from rltap._lazy import require_module
from rltap.config import ConfigError, RolloutConfig
from rltap.config.serve import SERVER_ENGINES

__all__ = [
    "RAY_EXTRA",
    "actor_configs",
    "actor_store",
    "connect",
    "require_ray",
    "server_node",
    "start_actors",
]

RAY_EXTRA = "rltap[ray]"


def require_ray() -> ModuleType:
    """The `ray` module, or an ImportError naming the extra that installs it."""
    return require_module("ray", RAY_EXTRA, "--ray")


def connect(address: str | None) -> ModuleType:
    """`ray.init(address)` unless this process is connected already; "" or None starts a
    local cluster (or joins the one RAY_ADDRESS names, as `ray.init` does)."""
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(address=address or None, include_dashboard=False, log_to_driver=True)
    return ray


def actor_configs(config: RolloutConfig) -> list[RolloutConfig]:
    """Each actor's settings: the command's, with `--url` cut to that actor's server and a
    `--store` of its own."""
    specs = []
    for index, url in enumerate(_servers_or_replicas(config)):
        serve = config.serve.with_engine(url=url)
        store = serve.store.store
        if store:
            serve = serve.with_store(str(actor_store(Path(store), index)))
        specs.append(config.with_serve(serve))
    return specs


def actor_store(store: Path, index: int) -> Path:
    """Actor `index`'s capture store for `--store STORE`: one SQLite writer per file
    (capture.sqlite -> capture-actor0.sqlite, capture-actor1.sqlite, ...)."""
    return store.with_name(f"{store.stem}-actor{index}{store.suffix}")


def _servers_or_replicas(config: RolloutConfig) -> list[str | None]:
    """One entry per actor: its server's URL, or None for an embedded engine replica."""
    engine, replicas = config.serve.engine, config.ray.replicas
    if engine.engine not in SERVER_ENGINES:
        count = 1 if replicas is None else replicas
        if count < 1:
            raise ConfigError("--replicas must be at least 1")
        return [None] * count
    urls = [url.strip() for url in (engine.url or "").split(",") if url.strip()]
    if not urls:
        msg = f"--ray with --engine {engine.engine} needs --url URL1,URL2,... (one actor each)"
        raise ConfigError(msg)
    if replicas not in (None, len(urls)):
        msg = f"--replicas {replicas} but {len(urls)} servers in --url: one actor per server"
        raise ConfigError(msg)
    return list(urls)


def server_node(url: str) -> str | None:
    """The Ray node id of the machine serving `url`: the driver's own for a loopback address,
    the live node of that IP otherwise; None when no node has it."""
    ray = require_ray()
    try:
        ip = ipaddress.ip_address(socket.gethostbyname(urlsplit(url).hostname or ""))
    except (OSError, ValueError):
        return None
    if ip.is_loopback:
        return str(ray.get_runtime_context().get_node_id())
    for node in ray.nodes():
        if node.get("Alive") and node.get("NodeManagerAddress") == str(ip):
            return str(node["NodeID"])
    return None


def start_actors(config: RolloutConfig) -> list[Any]:
    """One `RolloutActor` per replica or server (not started yet: call `start` on each)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rltap.rollout.ray.actor import RolloutActor

    ray = require_ray()
    remote = ray.remote(RolloutActor)
    handles = []
    for spec in actor_configs(config):
        options: dict[str, Any] = {
            "num_cpus": config.ray.actor_cpus,
            "num_gpus": config.ray.actor_gpus,
            "max_restarts": 0,  # a lost actor's episodes run again elsewhere, not on a restart
        }
        engine = spec.serve.engine
        node = server_node(engine.url or "") if engine.engine in SERVER_ENGINES else None
        if node is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        handles.append(remote.options(**options).remote(spec))
    return handles
