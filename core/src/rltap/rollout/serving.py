"""What a rollout runs on, built from its settings (`rltap.config`): the engine and an
in-process proxy on 127.0.0.1 (`local_proxy`), the agent's workflow against a proxy
(`agent_workflow`), and the two together (`local_workflow`). `rltap rollout`, `rltap train` and
every Ray rollout actor (`rltap.rollout.ray`) set themselves up with these.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rltap.config import ConfigError, RolloutConfig, ServeConfig
from rltap.engines.base import InferenceEngine
from rltap.engines.managed import launched_engines
from rltap.proxy import ProxyServer, ServeSetup
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings, resolve_workflow

__all__ = ["Serving", "agent_workflow", "local_proxy", "local_workflow"]


@dataclass(slots=True, frozen=True)
class Serving:
    """A running proxy: its engine, address, admin key and the tokenizer's pad id."""

    engine: InferenceEngine
    url: str
    admin_key: str
    pad_token_id: int


@contextlib.asynccontextmanager
async def local_proxy(
    config: ServeConfig,
    *,
    engine: InferenceEngine | None = None,
    tokenizer: Any = None,
    run_dir: str | Path | None = None,
    lora_rank: int = 0,
    max_loras: int = 1,
) -> AsyncIterator[Serving]:
    """The engine of `config` (or `engine`, built by the caller) behind a proxy on this event
    loop (a fresh admin key), rendering with `tokenizer` when the caller has it loaded. With
    --launch the engine's servers start first (their logs in `run_dir`/engines, `max_loras`
    LoRA adapters, one per policy, up to `lora_rank` served) and stop at the end
    (`rltap.engines.managed.launched_engines`)."""
    admin_key = secrets.token_urlsafe(24)
    launched = launched_engines(config, run_dir=run_dir, lora_rank=lora_rank, max_loras=max_loras)
    async with launched as config:
        setup = ServeSetup.load(config, engine=engine, tokenizer=tokenizer)
        pad = setup.renderer.tokenizer.pad_token_id or 0
        async with ProxyServer(setup.app(admin_key)) as server:
            yield Serving(setup.engine, server.url, admin_key, int(pad))


def agent_workflow(config: RolloutConfig, proxy_url: str, admin_key: str) -> OpenAIProxyWorkflow:
    """The config's agent as a workflow against the proxy at `proxy_url`, with the config's
    settings (`WorkflowSettings.of`: its style, room for every episode in flight in subprocess
    mode)."""
    workflow = resolve_workflow(
        config.agent,
        proxy_addr=proxy_url,
        admin_key=admin_key,
        settings=WorkflowSettings.of(config),
    )
    if not isinstance(workflow, OpenAIProxyWorkflow):
        msg = f"{config.agent} must be an agent with run(data, **kwargs), not a RolloutWorkflow"
        raise ConfigError(msg)
    return workflow


@contextlib.asynccontextmanager
async def local_workflow(
    config: RolloutConfig,
    *,
    engine: InferenceEngine | None = None,
    tokenizer: Any = None,
    lora_rank: int = 0,
    max_loras: int = 1,
) -> AsyncIterator[tuple[Serving, OpenAIProxyWorkflow]]:
    """`local_proxy` (on `engine` and with `tokenizer`, when given; launched servers logging
    into the run's --out, serving `max_loras` LoRA adapters up to `lora_rank`) and the config's
    agent against it; the workflow is closed first at the end."""
    async with local_proxy(
        config.serve,
        engine=engine,
        tokenizer=tokenizer,
        run_dir=config.out,
        lora_rank=lora_rank,
        max_loras=max_loras,
    ) as serving:
        workflow = agent_workflow(config, serving.url, serving.admin_key)
        async with contextlib.aclosing(workflow):
            yield serving, workflow
