"""What a rollout runs on, built from the `rltap serve` / `rollout` / `train` flags: the engine
and an in-process proxy on 127.0.0.1 (`local_proxy`), the agent's workflow against a proxy
(`agent_workflow`), and the two together (`local_workflow`). `rltap rollout`, `rltap train` and
every Ray rollout actor (`rltap.distributed`) set themselves up with these.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

from rltap.engines.base import InferenceEngine
from rltap.export import ExportStyle
from rltap.proxy import ProxyServer, create_app, serve_config
from rltap.workflow import OpenAIProxyWorkflow, resolve_workflow

__all__ = ["Serving", "agent_workflow", "local_proxy", "local_workflow"]


@dataclass(slots=True, frozen=True)
class Serving:
    """A running proxy: its engine, address, admin key and the tokenizer's pad id."""

    engine: InferenceEngine
    url: str
    admin_key: str
    pad_token_id: int


@contextlib.asynccontextmanager
async def local_proxy(args: argparse.Namespace) -> AsyncIterator[Serving]:
    """The engine of the flags behind a proxy on this event loop (a fresh admin key)."""
    admin_key = secrets.token_urlsafe(24)
    setup = serve_config(args, admin_key)
    pad = setup.renderer.tokenizer.pad_token_id or 0
    async with ProxyServer(create_app(setup.engine, setup.renderer, setup.config)) as server:
        yield Serving(setup.engine, server.url, admin_key, int(pad))


def agent_workflow(
    args: argparse.Namespace, proxy_url: str, admin_key: str, *, style: ExportStyle
) -> OpenAIProxyWorkflow:
    """The flags' agent (`args.agent`) as a workflow against the proxy at `proxy_url`, with
    room for every episode in flight in subprocess mode."""
    link_factors = getattr(args, "link_factors", None)
    workflow = resolve_workflow(
        args.agent,
        proxy_addr=proxy_url,
        admin_key=admin_key,
        mode=args.mode,
        discount=args.discount,
        style=style,
        link_factors=dict(link_factors) if link_factors else None,
        agents=getattr(args, "agents", None),
        episode_timeout=args.episode_timeout,
        subproc_workers=args.concurrency * args.group_size,
    )
    if not isinstance(workflow, OpenAIProxyWorkflow):
        msg = f"{args.agent} must be an agent with run(data, **kwargs), not a RolloutWorkflow"
        raise SystemExit(msg)
    return workflow


@contextlib.asynccontextmanager
async def local_workflow(
    args: argparse.Namespace, *, style: ExportStyle
) -> AsyncIterator[tuple[Serving, OpenAIProxyWorkflow]]:
    """`local_proxy` and the flags' agent against it; the workflow is closed first at the end."""
    async with local_proxy(args) as serving:
        workflow = agent_workflow(args, serving.url, serving.admin_key, style=style)
        async with contextlib.aclosing(workflow):
            yield serving, workflow
