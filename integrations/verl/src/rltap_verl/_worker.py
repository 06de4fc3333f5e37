"""One rltap proxy per verl agent-loop worker: started on its event loop by the first episode,
shared by every episode after it, closed with the worker.

verl builds an agent loop per sample, in each `AgentLoopWorker` (a Ray actor with one event
loop). The proxy is that worker's: `worker_proxy` starts it on the running loop the first time
(the episodes arriving meanwhile wait for the same start) and hands it out afterwards, keyed by
the loop and verl's server manager. It runs as tasks of that loop (uvicorn, no thread or
process of its own), so it cannot outlive the worker; `close_worker_proxies` stops it cleanly,
and an `atexit` hook does so when the worker's process ends with the proxy still open.

Usage:
    proxy = await worker_proxy(server_manager, lambda: start_worker_proxy(...))
    runner = proxy.runner(settings)
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from rltap.chat import check_same_tokenizer
from rltap.config import ConfigError
from rltap.rollout import OpenAIProxyWorkflow, WorkflowSettings, resolve_workflow
from rltap.rollout.branches import AllEpisodesFailed
from rltap.rollout.serving import Serving, local_proxy
from rltap_verl._engine import ServerManager, VerlServerEngine, logprob_convention_of
from rltap_verl._settings import RltapSettings

__all__ = [
    "EpisodeRunner",
    "FailureStreak",
    "WorkerProxy",
    "close_worker_proxies",
    "start_worker_proxy",
    "worker_proxy",
]

# Seconds the exit hook gives a proxy to stop on a loop still running in another thread.
_EXIT_TIMEOUT = 10.0


@dataclass
class FailureStreak:
    """The failed episodes since the last one that succeeded; `limit` in a row raise
    `AllEpisodesFailed` with their errors (and every failure after them, until a success)."""

    limit: int
    errors: list[str] = field(default_factory=list)

    def succeeded(self) -> None:
        self.errors.clear()

    def failed(self, error: str) -> None:
        self.errors.append(error)
        if len(self.errors) >= self.limit:
            raise AllEpisodesFailed(self.errors[-self.limit :])


@dataclass
class EpisodeRunner:
    """One agent's workflow against the worker's proxy, and its failure streak."""

    workflow: OpenAIProxyWorkflow
    streak: FailureStreak


class WorkerProxy:
    """A running proxy (`serving`) on verl's server manager, and the agents run against it."""

    def __init__(self, serving: Serving, stack: contextlib.AsyncExitStack) -> None:
        self.serving = serving
        self._stack = stack
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(3600.0, connect=30.0))
        self._runners: dict[str, EpisodeRunner] = {}

    @property
    def engine(self) -> VerlServerEngine:
        engine = self.serving.engine
        assert isinstance(engine, VerlServerEngine)
        return engine

    def runner(self, settings: RltapSettings) -> EpisodeRunner:
        """The workflow of `settings`' agent, built the first time (the agent loaded once)."""
        key = repr(settings)
        if key not in self._runners:
            workflow = resolve_workflow(
                settings.agent,
                settings.agent_kwargs,
                proxy_addr=self.serving.url,
                admin_key=self.serving.admin_key,
                settings=WorkflowSettings(episodes=settings.episode_config()),
                http_client=self._http,
            )
            if not isinstance(workflow, OpenAIProxyWorkflow):
                msg = f"rltap.agent {settings.agent} must be an agent with run(data, **kwargs)"
                raise ConfigError(msg)
            self._runners[key] = EpisodeRunner(
                workflow, FailureStreak(settings.max_failed_in_a_row)
            )
        return self._runners[key]

    async def aclose(self) -> None:
        """Close the agents' workflows, the HTTP client, then the proxy."""
        for runner in self._runners.values():
            await runner.workflow.aclose()
        self._runners.clear()
        await self._http.aclose()
        await self._stack.aclose()


async def start_worker_proxy(
    *,
    server_manager: ServerManager,
    tokenizer: Any,
    rollout: Mapping[str, Any],
    model_path: str | None,
    settings: RltapSettings,
) -> WorkerProxy:
    """A proxy on `server_manager` rendering with verl's `tokenizer` (or with
    `settings.tokenizer`, once it is checked to be the same), bounded by verl's `rollout`
    config (prompt_length + response_length a sequence, response_length a reply)."""
    folder, rendering = _rendering_tokenizer(tokenizer, model_path, settings)
    engine = VerlServerEngine(
        server_manager,
        backend=str(rollout.get("name", "vllm")),
        logprob_convention=logprob_convention_of(rollout),
    )
    response_length = int(rollout["response_length"])
    config = settings.serve_config(
        tokenizer_dir=folder,
        max_context=int(rollout["prompt_length"]) + response_length,
        max_tokens=response_length,
    )
    stack = contextlib.AsyncExitStack()
    serving = await stack.enter_async_context(
        local_proxy(config, engine=engine, tokenizer=rendering)
    )
    return WorkerProxy(serving, stack)


def _rendering_tokenizer(
    tokenizer: Any, model_path: str | None, settings: RltapSettings
) -> tuple[str, Any]:
    if settings.tokenizer is not None:
        from transformers import AutoTokenizer

        own = AutoTokenizer.from_pretrained(settings.tokenizer)
        check_same_tokenizer(tokenizer, own, trainer_name="verl")
        return settings.tokenizer, own
    # The renderer reads the folder's generation_config.json (its end-of-turn ids) besides the
    # tokenizer verl already loaded.
    for folder in (getattr(tokenizer, "name_or_path", None), model_path):
        if folder and Path(folder).is_dir():
            return str(folder), tokenizer
    msg = (
        "verl's tokenizer has no local folder (name_or_path and actor_rollout_ref.model.path "
        "are not directories): set rltap.tokenizer to the model's tokenizer folder"
    )
    raise ConfigError(msg)


# (id(loop), id(server manager), rendering settings) -> the loop, the manager (kept alive so its
# id stays its own) and the task starting that worker's proxy.
_WORKERS: dict[
    tuple[int, int, tuple[str | None, ...]],
    tuple[asyncio.AbstractEventLoop, Any, asyncio.Task[WorkerProxy]],
] = {}


async def worker_proxy(
    server_manager: ServerManager,
    settings: RltapSettings,
    start: Callable[[], Awaitable[WorkerProxy]],
) -> WorkerProxy:
    """The proxy of this event loop, `server_manager` and `settings`' rendering, started with
    `start()` the first time; a failed start raises here and is tried again by the next
    episode."""
    loop = asyncio.get_running_loop()
    key = (id(loop), id(server_manager), settings.rendering)
    if key not in _WORKERS:

        async def starting() -> WorkerProxy:
            return await start()

        _WORKERS[key] = (loop, server_manager, loop.create_task(starting()))
    task = _WORKERS[key][2]
    try:
        # Shielded: an episode cancelled while waiting must not cancel the shared start.
        return await asyncio.shield(task)
    except Exception:
        if task.done() and not task.cancelled() and task.exception() is not None:
            _WORKERS.pop(key, None)
        raise


async def close_worker_proxies() -> None:
    """Stop the proxies started on the running event loop (a worker's, or a test's)."""
    loop = asyncio.get_running_loop()
    for key, (owner, _, task) in list(_WORKERS.items()):
        if owner is not loop:
            continue
        del _WORKERS[key]
        if not task.done():
            await asyncio.wait([task])
        if task.cancelled() or task.exception() is not None:
            continue  # a start that failed left nothing running
        await task.result().aclose()


def _close_at_exit() -> None:
    # The worker's process is ending: stop each proxy on its own loop, if that loop can still
    # run anything (a loop already closed took its sockets with it).
    for owner in {entry[0] for entry in _WORKERS.values()}:
        if owner.is_closed():
            continue
        if owner.is_running():
            future = asyncio.run_coroutine_threadsafe(close_worker_proxies(), owner)
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                future.result(timeout=_EXIT_TIMEOUT)
        else:
            owner.run_until_complete(close_worker_proxies())


atexit.register(_close_at_exit)
