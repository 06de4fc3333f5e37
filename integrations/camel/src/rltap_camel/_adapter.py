"""`CamelAdapter`: a CAMEL agent (ChatAgent, RolePlaying, ...) as an rltap agent.

The user writes the episode, `episode(data, model)`, with CAMEL's own classes on the `ProxyModel`
it is handed; the adapter supplies that model on the episode's proxy session, runs the episode and
turns its result into the reward. A plain `def` episode (CAMEL's sync `step`, `RolePlaying(...)`,
whose task-specify agent calls the model synchronously) runs in a thread of its own, so it never
blocks the event loop that, in inline mode, also serves the proxy; an `async def` episode
(`astep`) is awaited on the loop, with the workflow's http client.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from camel.utils import BaseTokenCounter

from rltap.adapter import AgentAdapter, Connection, RewardFn
from rltap_camel._client import DEFAULT_CONTEXT_WINDOW, DEFAULT_TIMEOUT, ProxyModel
from rltap_camel._requirements import FRAMEWORK_REQUIREMENT

__all__ = ["CamelAdapter", "EpisodeFn"]

# episode(data, model) -> result: sync or async; keep it at module level (subprocess mode
# pickles the adapter, and with it the function, by reference).
EpisodeFn = Callable[[Any, ProxyModel], Any]


class CamelAdapter(AgentAdapter):
    """Runs a CAMEL episode against the rltap proxy; `run(data, **kwargs)` returns its reward.

    Usage:
        def solve(data, model):
            agent = ChatAgent("You are a calculator.", model=model, tools=[add])
            return agent.step(data["question"]).msgs[0].content

        def exact_match(answer, data):
            return float(data["answer"] in answer)

        agent = CamelAdapter(solve, reward_fn=exact_match)
        workflow = OpenAIProxyWorkflow(agent, proxy_addr=url, admin_key=key)

    Give the episode as `episode=` or override the `episode` method (sync or async). Without a
    `reward_fn` the episode's own return value is the reward (a number for the last reply, a
    dict {interaction_id: reward}, or None). `model` is the name sent to the proxy; `stream`,
    `config`, `token_counter`, `context_window`, `timeout` and `max_retries` configure the
    `ProxyModel` (see there).
    """

    requirement: ClassVar[str] = FRAMEWORK_REQUIREMENT

    def __init__(
        self,
        episode: EpisodeFn | None = None,
        *,
        reward_fn: RewardFn | None = None,
        model: str = "rltap",
        stream: bool = False,
        config: dict[str, Any] | None = None,
        token_counter: BaseTokenCounter | None = None,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 0,
    ) -> None:
        super().__init__(reward_fn=reward_fn, model=model)
        if episode is None and type(self).episode is CamelAdapter.episode:
            msg = f"{type(self).__name__} needs an episode: pass episode=fn or override episode()"
            raise TypeError(msg)
        self.episode_fn = episode
        self.stream = stream
        self.config = dict(config or {})
        self.token_counter = token_counter
        self.context_window = context_window
        self.timeout = timeout
        self.max_retries = max_retries

    def episode(self, data: Any, model: ProxyModel) -> Any:
        """One episode on `data` with CAMEL agents on `model`; override it (def or async def).

        Its result goes to `reward_fn`; extra keyword arguments of `run` are passed on to it.
        """
        assert self.episode_fn is not None  # __init__ refuses an adapter without an episode
        return self.episode_fn(data, model)

    def make_model(self, connection: Connection) -> ProxyModel:
        """The episode's model backend on `connection` (override to configure it per episode)."""
        return ProxyModel(
            connection,
            model=self.model,
            stream=self.stream,
            config=self.config,
            token_counter=self.token_counter,
            context_window=self.context_window,
            timeout=self.timeout,
            max_retries=self.max_retries,
        )

    async def _run(self, data: Any, connection: Connection, **kwargs: Any) -> Any:
        episode = self.episode_fn if self.episode_fn is not None else self.episode
        model = self.make_model(connection)
        try:  # what CAMEL raises (HTTP errors, error events in a stream): the base class maps it
            if inspect.iscoroutinefunction(episode):
                result = await episode(data, model, **kwargs)
            else:
                result = await _in_own_thread(episode, data, model, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
            model.raise_unanswered_failure()
        finally:
            await model.aclose()
        return result


async def _in_own_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`function(*args, **kwargs)` in a new thread, with this context's variables.

    Like `asyncio.to_thread`, but not capped by the default executor's few workers (6 on two
    cores): every concurrent episode gets a thread, as every async episode gets a task.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.cancelled():  # the episode timed out; the thread's outcome has no taker
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def target() -> None:
        try:
            result, error = context.run(function, *args, **kwargs), None
        except BaseException as exc:
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed while the thread ran
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=target, name="rltap-camel-episode", daemon=True).start()
    return await done
