"""Agents in a subprocess pool: for sync agents, and agents that must not share a process.

Each episode is one task: the pickled agent and its row go to a worker of a `ProcessPoolExecutor`
("spawn" start method: no threads or engine state inherited), which sets OPENAI_BASE_URL,
OPENAI_API_KEY, ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY for that episode only and restores them
afterwards, so episodes that share a worker never see each other's keys. `run` may be sync or
async (run with `asyncio.run`).

A worker that dies (os._exit, a signal) breaks the executor: the episodes running on it are
rejected with `EpisodeFailed` and the next episode gets a fresh executor. A task that outlives its
timeout is rejected; its session is ended by the caller, so the agent's next call fails fast.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import multiprocessing
import os
import pickle
import sys
from concurrent.futures.process import BrokenProcessPool
from typing import Any

__all__ = ["ENV_KEYS", "AgentError", "AgentPool", "EpisodeFailed", "episode_env"]

ENV_KEYS = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")


class EpisodeFailed(Exception):
    """The subprocess running an episode died before returning."""


class AgentError(Exception):
    """An agent's exception that cannot cross the process boundary as itself (its text does)."""


def episode_env(proxy_url: str, api_key: str) -> dict[str, str]:
    """What a subprocess agent sees: OpenAI clients append paths to /v1, Anthropic to the root."""
    return {
        "OPENAI_BASE_URL": f"{proxy_url}/v1",
        "OPENAI_API_KEY": api_key,
        "ANTHROPIC_BASE_URL": proxy_url,
        "ANTHROPIC_API_KEY": api_key,
    }


def _preload(paths: list[str], file_modules: dict[str, str]) -> None:
    """Worker start: the parent's import path, and agent modules it loaded from files."""
    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)
    if not file_modules:
        return
    import importlib.util

    for name, location in file_modules.items():
        spec = importlib.util.spec_from_file_location(name, location)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


def _portable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling both ways, else an `AgentError` carrying its text.

    An exception the parent cannot unpickle (the openai SDK's `APIStatusError` needs keyword
    arguments) would mark the whole pool broken and fail every episode running on it; SystemExit
    would end the parent's rollout.
    """
    if isinstance(exc, Exception) and _round_trips(exc):
        return exc
    return AgentError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")


def _round_trips(exc: Exception) -> bool:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # whatever fails here would fail in the parent's result thread
        return False
    return True


def _run_episode(agent: Any, data: Any, env: dict[str, str]) -> Any:
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        result = agent.run(data)
        if inspect.isawaitable(result):
            result = asyncio.run(_wait(result))
        return result
    except BaseException as exc:
        portable = _portable(exc)
        if portable is exc:
            raise
        raise portable from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


async def _wait(awaitable: Any) -> Any:
    return await awaitable


def _file_modules() -> dict[str, str]:
    # Agents loaded by path (`agent.py:Agent`) live in modules no worker could import by name.
    return {
        name: str(module.__file__)
        for name, module in list(sys.modules.items())
        if name.startswith("rltap_agent_") and getattr(module, "__file__", None)
    }


class AgentPool:
    """A process pool of `workers` agents; rebuilt when a worker dies."""

    def __init__(self, workers: int = 4) -> None:
        if workers < 1:
            msg = f"workers must be >= 1, got {workers}"
            raise ValueError(msg)
        self.workers = workers
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None

    def _pool(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_preload,
                initargs=(list(sys.path), _file_modules()),
            )
        return self._executor

    async def run(self, agent: Any, data: Any, proxy_url: str, api_key: str) -> Any:
        """`agent.run(data)` in a worker with this episode's environment."""
        executor = self._pool()
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(
                executor, _run_episode, agent, data, episode_env(proxy_url, api_key)
            )
            return await future
        except BrokenProcessPool as exc:
            if self._executor is executor:
                self._executor = None
                executor.shutdown(wait=False, cancel_futures=True)
            msg = f"the agent's worker process died: {exc}"
            raise EpisodeFailed(msg) from exc

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
