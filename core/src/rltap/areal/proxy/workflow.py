"""AReaL's `OpenAIProxyWorkflow(mode, agent, proxy_addr, admin_api_key, discount, export_style,
subproc_max_workers)`: an agent's episodes through a running rltap proxy.

It is `rltap.OpenAIProxyWorkflow` with AReaL's constructor, defaults and checks: `run` must be
async in both modes (a subprocess runs it with `asyncio.run`, the agent may use the sync
`OpenAI()` client built from `OPENAI_BASE_URL` / `OPENAI_API_KEY` there), and rewards are
discounted in insertion order (AReaL's numbers). The engine `arun_episode(engine, data)` is
given is not used: the proxy at `proxy_addr` generates (put an AReaL engine behind it with
`rltap.areal.ArealEngine`). `mode="online"` needs AReaL's proxy gateway, which rltap has not.
"""

from __future__ import annotations

import inspect
from typing import Any

from rltap.config import EpisodeConfig
from rltap.rollout.workflow import OpenAIProxyWorkflow as RltapProxyWorkflow
from rltap.rollout.workflow import WorkflowSettings

__all__ = ["DEFAULT_ADMIN_API_KEY", "OpenAIProxyWorkflow"]

# AReaL's default admin key (`rltap serve --admin-key areal-admin-key` accepts it).
DEFAULT_ADMIN_API_KEY = "areal-admin-key"


class OpenAIProxyWorkflow(RltapProxyWorkflow):
    """AReaL 1.0.4's proxy workflow (see the module)."""

    def __init__(
        self,
        mode: str,
        agent: Any | None = None,
        proxy_addr: str = "",
        admin_api_key: str = DEFAULT_ADMIN_API_KEY,
        discount: float = 1.0,
        export_style: str = "individual",
        subproc_max_workers: int = 4,
        proxy_gateway_addr: str | None = None,
    ) -> None:
        if mode not in ("inline", "subproc", "online"):
            msg = f"Invalid mode: {mode}. Must be 'inline', 'subproc', or 'online'"
            raise ValueError(msg)
        if mode == "online":
            msg = (
                f"mode='online' needs AReaL's proxy gateway ({proxy_gateway_addr!r}); rltap "
                "runs agents inline or in a subprocess"
            )
            raise ValueError(msg)
        if agent is None:
            msg = "agent is required when mode is 'inline' or 'subproc'"
            raise ValueError(msg)
        if not callable(getattr(agent, "run", None)):
            msg = f"Agent must have a callable 'run' method; {type(agent).__name__} has none"
            raise TypeError(msg)
        if not inspect.iscoroutinefunction(agent.run):
            msg = (
                f"Agent's 'run' method must be an async function; {type(agent).__name__}.run is not"
            )
            raise TypeError(msg)
        if not proxy_addr:
            msg = "proxy_addr is required: the address of a running rltap proxy (`rltap serve`)"
            raise ValueError(msg)
        if mode == "subproc" and subproc_max_workers < 1:
            msg = f"subproc_max_workers must be >= 1, got {subproc_max_workers}"
            raise ValueError(msg)
        # AReaL's pool size is the episodes in flight rltap sizes a subprocess pool by.
        episodes = EpisodeConfig(
            mode="subproc" if mode == "subproc" else "inline",
            discount=discount,
            concurrency=max(1, subproc_max_workers),
        )
        settings = WorkflowSettings(
            episodes=episodes,
            style=export_style,  # type: ignore[arg-type]  # checked by the proxy: a 400 names it
            discount_mode="chain",
        )
        super().__init__(agent, proxy_addr=proxy_addr, admin_key=admin_api_key, settings=settings)
        self.export_style = export_style
        self.subproc_max_workers = subproc_max_workers
