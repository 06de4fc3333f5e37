"""`rltap rollout`'s settings: the agent and its dataset, how its episodes run
(`EpisodeConfig`, shared with `rltap train`), how they are exported, the proxy's settings and
the Ray cluster's (`RolloutConfig`, also what each Ray rollout actor is given).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import Any, Literal

from rltap.config.flags import ConfigError, option, section
from rltap.config.serve import ServeConfig
from rltap.record.exported import ExportStyle

__all__ = [
    "RAY_GROUP",
    "AgentTask",
    "EpisodeConfig",
    "RayConfig",
    "RolloutConfig",
    "check_launch",
    "link_factor",
]

# The --help group of the Ray flags, which says what installs Ray.
RAY_GROUP = "ray (pip install 'rltap[ray]')"


def link_factor(text: str) -> tuple[str, float]:
    """`KIND=F` of --link-factor; checked again, with the others, by `check_link_factors`."""
    kind, sep, value = text.partition("=")
    try:
        if sep:
            return kind.strip(), float(value)
    except ValueError:
        pass
    msg = f"expected KIND=F (e.g. handoff=0.5), got {text!r}"
    raise argparse.ArgumentTypeError(msg)


@dataclass(frozen=True, kw_only=True)
class AgentTask:
    """The agent and the rows it runs on (both required)."""

    agent: str = option(help="pkg.module:Name or path/to/agent.py:Name", positional=True)
    data: str = option(help="JSONL dataset, one row per line")


@dataclass(frozen=True, kw_only=True)
class EpisodeConfig:
    """How the agent's episodes run: per row, at once, where, how long, how discounted."""

    group_size: int = option(1, "episodes per row (default %(default)s)")
    concurrency: int = option(8, "rows at once")
    mode: Literal["inline", "subproc"] = option(
        "inline", "inline: the agent in this event loop; subproc: in a process pool"
    )
    discount: float = option(1.0, "turn discount along the tree")
    episode_timeout: float | None = option(None, "seconds")
    seed: int | None = option(
        None,
        "seeds the engine's sampling: each episode's calls get seeds derived from (seed, row, "
        "episode, call), so a rerun samples the same tokens (default %(default)s: unseeded)",
    )

    def __post_init__(self) -> None:
        if self.group_size < 1 or self.concurrency < 1:
            msg = "--group-size and --concurrency must be at least 1"
            raise ConfigError(msg)


@dataclass(frozen=True, kw_only=True)
class RayConfig:
    """Where the episodes run with `--ray`: the cluster, the actors and their resources."""

    ray: str | None = option(
        None,
        "run the episodes on rollout actors of a Ray cluster (ray.init(ADDRESS); a new "
        "local cluster without one), each with its own engine and proxy",
        nargs="?",
        const="",
        metavar="ADDRESS",
    )
    replicas: int | None = option(
        None,
        "embedded engines, one actor each (default 1); with --engine vllm or sglang one "
        "actor per server of a comma-separated --url",
    )
    actor_cpus: float = option(1.0, "CPUs per actor (default 1)")
    actor_gpus: float = option(0.0, "GPUs per actor (default 0)")
    max_retries: int = option(
        2, "times an episode lost with its actor runs again on another (default 2)"
    )


def check_launch(serve: ServeConfig, ray: RayConfig) -> None:
    """Refuse (`ConfigError`) --launch with --ray: each rollout actor gets its engine as
    without it (--replicas embedded engines, or one per server of --url)."""
    if serve.launch.launch and ray.ray is not None:
        msg = (
            "--launch with --ray is not supported: start the servers and give their addresses "
            "to --url (one rollout actor each), or run without --ray"
        )
        raise ConfigError(msg)


def agents_option() -> Any:
    """`--agents`, of `rltap rollout` and `rltap train` (a field each)."""
    return option(
        None,
        "export only these agents' interactions (rewards are discounted over all first)",
        metavar="AGENT",
    )


@dataclass(frozen=True, kw_only=True)
class RolloutConfig(AgentTask):
    """`rltap rollout`: AGENT on every row of --data, the files in --out."""

    out: str = option(help="output folder")
    proxy: str | None = option(None, "use a running proxy at this URL")
    admin_key: str | None = option(None, "its admin key (or RLTAP_ADMIN_KEY)")
    episodes: EpisodeConfig = section(EpisodeConfig)
    style: ExportStyle = option(
        "individual",
        "export style; tree: batch.safetensors holds one token trie per row "
        "(rltap.record.pack_io), the lines stay one per interaction",
    )
    agents: list[str] | None = agents_option()
    link_factors: list[tuple[str, float]] | None = option(
        None,
        "share of a child's reward its parent gets, by link kind (prefix, rewrite, "
        "handoff, subagent, carry; 1.0 each unless given); repeat for several",
        flag="link-factor",
        metavar="KIND=F",
        parse=link_factor,
        append=True,
    )
    serve: ServeConfig = section(ServeConfig)
    ray: RayConfig = section(RayConfig, RAY_GROUP)

    def __post_init__(self) -> None:
        check_launch(self.serve, self.ray)
        if self.serve.launch.launch and self.proxy:
            raise ConfigError("--launch starts engine servers for a proxy of this run: no --proxy")

    def with_serve(self, serve: ServeConfig) -> RolloutConfig:
        """These settings on other proxy settings (`ServeConfig.with_store`, `with_engine`)."""
        return replace(self, serve=serve)
