"""`AgentRollout`: any rltap agent as TRL GRPOTrainer's `rollout_func`.

Each call runs the agent's episodes for the prompts TRL gives it, through an rltap proxy in
front of the policy TRL trains (`rltap_trl._generation`), and returns their branches as TRL's
rows (`rltap_trl._rows`). The proxy, its engine and the agent's workflow start at the first
call, on an event loop of the rollout's own thread (`BackgroundLoop`), and stay up between
calls; `close()` (or leaving a `with` block, or the interpreter's exit) stops them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rltap.adapter import check_framework
from rltap.config import ChatConfig, EpisodeConfig, LimitsConfig, ServeConfig
from rltap.proxy import ProxyServer, create_app
from rltap.record.sampling import EpisodeSampling, derive_seed
from rltap.rollout.branches import Branch, require_branches
from rltap.rollout.workflow import Episode, OpenAIProxyWorkflow, WorkflowSettings
from rltap_trl._generation import Generation, check_trainer, in_process, on_vllm_server
from rltap_trl._loop import BackgroundLoop
from rltap_trl._requirements import TRL_REQUIREMENT
from rltap_trl._rows import (
    PromptGroup,
    episodes_in_group,
    fill_group,
    prompt_groups,
    rollout_output,
)

__all__ = ["AgentRollout"]


@dataclass(slots=True)
class _Served:
    generation: Generation
    workflow: OpenAIProxyWorkflow
    url: str


class AgentRollout:
    """An rltap agent (`async def run(data, **kwargs)`, e.g. a `LangChainAdapter`) as the
    `rollout_func` of TRL's `GRPOTrainer`.

    Usage:
        with AgentRollout(agent) as rollout:
            trainer = GRPOTrainer(model=model, args=args, train_dataset=dataset,
                                  processing_class=tokenizer, reward_funcs=rltap_reward,
                                  rollout_func=rollout)
            trainer.train()

    The agent's `data` is each dataset row's `prompt` (TRL hands rollout_func the prompts
    only): put the row the agent reads there, e.g. {"question": ..., "answer": ...}. Each
    group of `num_generations` rows of one prompt runs `episodes_per_prompt` episodes (None:
    one per row); their branches fill the rows, and rows left become inert (`rltap_trl._rows`).
    `episodes` says how episodes run (`mode`, `discount`, `episode_timeout`, `seed`: each
    episode's seed derives from it, default the trainer's `args.seed`; TRL's batch decides
    how many run). `chat` is the proxy's chat section (default: `max_completion_length` for a
    call that sets no max_tokens); `tokenizer` what rltap renders with (default: the one saved
    with the model, which must be TRL's). Every call samples at TRL's `args.temperature`.
    """

    def __init__(
        self,
        agent: Any,
        *,
        episodes_per_prompt: int | None = None,
        episodes: EpisodeConfig | None = None,
        chat: ChatConfig | None = None,
        tokenizer: Any = None,
    ) -> None:
        self.trl_version = check_framework(TRL_REQUIREMENT)
        if episodes_per_prompt is not None and episodes_per_prompt < 1:
            msg = f"episodes_per_prompt must be at least 1, got {episodes_per_prompt}"
            raise ValueError(msg)
        self.agent = agent
        self.episodes_per_prompt = episodes_per_prompt
        self.episodes = episodes or EpisodeConfig()
        self.chat = chat
        self.tokenizer = tokenizer
        # Each row's branch (None: an inert row) of the last call, for logging and inspection.
        self.last_rows: list[Branch | None] = []
        self._loop = BackgroundLoop("rltap-trl-rollout")
        self._stack: contextlib.AsyncExitStack | None = None
        self._served: _Served | None = None
        self._trainer: Any = None
        self._calls = 0

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's `rollout_func(prompts, trainer)`: one row per prompt given, in order."""
        self._bind(trainer)
        training = bool(trainer.model.training)  # TRL's own test of train vs eval
        num_generations = trainer.num_generations if training else trainer.num_generations_eval
        offset = trainer.accelerator.process_index * len(prompts)
        groups = prompt_groups(prompts, num_generations, offset)
        rows = self._loop.run(self._rollout(prompts, trainer, groups))
        self._calls += 1
        self.last_rows = rows
        pad = trainer.processing_class.pad_token_id
        return rollout_output(rows, int(pad if pad is not None else 0))

    def _bind(self, trainer: Any) -> None:
        if self._trainer is None:
            check_trainer(trainer)
            self._trainer = trainer
        elif trainer is not self._trainer:
            msg = "this AgentRollout serves another trainer already: make one per GRPOTrainer"
            raise ValueError(msg)

    async def _rollout(
        self, prompts: Sequence[Any], trainer: Any, groups: Sequence[PromptGroup]
    ) -> list[Branch | None]:
        model = trainer.model
        training = bool(model.training)  # before the engine starts: it sets eval mode
        served = self._served or await self._start(trainer)
        await served.generation.stamp(int(trainer.state.global_step))
        counts = [episodes_in_group(group, self.episodes_per_prompt) for group in groups]
        if served.generation.module is not None:
            model.eval()  # no dropout in what the engine samples (TRL set train mode)
        try:
            runs = [
                self._episode(served, trainer, prompts[group.start], index, episode)
                for index, (group, count) in enumerate(zip(groups, counts, strict=True))
                for episode in range(count)
            ]
            episodes = await asyncio.gather(*runs)
        finally:
            model.train(training)  # TRL reads the mode it logs under from it
        branches = require_branches(episodes)
        rows: list[Branch | None] = []
        for group, count in zip(groups, counts, strict=True):
            mine, branches = branches[:count], branches[count:]
            rows.extend(fill_group(group, mine, self.episodes_per_prompt))
        return rows

    async def _episode(
        self, served: _Served, trainer: Any, data: Any, group: int, episode: int
    ) -> Episode:
        base = self.episodes.seed if self.episodes.seed is not None else int(trainer.args.seed)
        process = int(trainer.accelerator.process_index)
        sampling = EpisodeSampling(
            seed=derive_seed(base, process, self._calls, group, episode),
            temperature=float(trainer.args.temperature),
        )
        return await served.workflow.run_episode(data, sampling=sampling)

    async def _start(self, trainer: Any) -> _Served:
        stack = contextlib.AsyncExitStack()
        try:
            served = await self._serve(trainer, stack)
        except BaseException:
            await stack.aclose()  # what started before the failure stops; the next call retries
            raise
        self._stack, self._served = stack, served
        return served

    async def _serve(self, trainer: Any, stack: contextlib.AsyncExitStack) -> _Served:
        args = trainer.args
        chat = self.chat or ChatConfig(default_max_tokens=int(args.max_completion_length))
        if args.use_vllm:
            generation = await on_vllm_server(trainer, chat, self.tokenizer)
            stack.push_async_callback(generation.engine.close)  # also if the proxy fails
        else:
            generation = in_process(trainer, chat, self.tokenizer)
        admin_key = secrets.token_urlsafe(24)
        # The app starts the engine (the embedded one on the model) and closes it at its end.
        config = ServeConfig(chat=chat, limits=LimitsConfig(model_name="trl-policy"))
        app = create_app(generation.engine, generation.renderer, config, admin_key=admin_key)
        server = await stack.enter_async_context(ProxyServer(app))
        settings = WorkflowSettings(episodes=self.episodes)
        workflow = OpenAIProxyWorkflow(
            self.agent, proxy_addr=server.url, admin_key=admin_key, settings=settings
        )
        stack.push_async_callback(workflow.aclose)
        return _Served(generation, workflow, server.url)

    @property
    def proxy_url(self) -> str | None:
        """The proxy's address once the first call started it; None before."""
        return None if self._served is None else self._served.url

    def close(self) -> None:
        """Stop the agent's workflow, the proxy and its engine, then the rollout's thread."""
        stack, self._stack, self._served = self._stack, None, None
        if stack is not None and self._loop.running:
            self._loop.run(stack.aclose())
        self._loop.close()

    def __enter__(self) -> AgentRollout:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
