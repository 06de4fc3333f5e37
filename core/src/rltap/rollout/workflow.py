"""Rollout workflows: any agent with `async def run(data, **kwargs)` becomes training data.

    RolloutWorkflow            arun_episode(engine, data) -> tensors | interactions | pack | None
    ├── OpenAIProxyWorkflow    runs an agent against the proxy, one session per episode
    └── GroupedRolloutWorkflow group_size episodes of one row, merged

`resolve_workflow` turns what a user names (an instance, a class, "pkg.module:Name",
"path/to/agent.py:Name") into a workflow. OpenAIProxyWorkflow runs the agent inline (awaited in
this event loop, with base_url/api_key/http_client passed in) or in a subprocess pool (the child
sees OPENAI_* and ANTHROPIC_* variables for that episode only); how it runs and exports each
episode is one `WorkflowSettings`, built from `rltap.config`'s settings (`WorkflowSettings.of`).

With style "tree" an episode is one `TreePack` (`rltap.record.pack`), decoded once from the
proxy's export, and a group's packs merge into one trie (`merge_tries`: the prompt the group
shares appears once).
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import logging
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import httpx

from rltap.client import OpenAIProxyClient, interactions_from_export, tree_from_export
from rltap.config import EpisodeConfig, RolloutConfig
from rltap.record.errors import RltapError
from rltap.record.pack import TreePack, merge_tries
from rltap.record.sampling import EpisodeSampling
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.rollout.loading import WorkflowError, load_object
from rltap.rollout.subproc import AgentPool, EpisodeFailed
from rltap.tree.export import ExportStyle, concat_padded_tensors
from rltap.tree.rewards import Aggregate, DiscountMode, LinkFactors, RewardScope, check_link_factors

__all__ = [
    "Episode",
    "EpisodeResult",
    "GroupedRolloutWorkflow",
    "OpenAIProxyWorkflow",
    "RolloutWorkflow",
    "WorkflowError",
    "WorkflowSettings",
    "load_object",
    "resolve_workflow",
]

logger = logging.getLogger("rltap.rollout.workflow")

Interactions = dict[str, InteractionWithTokenLogpReward]
# A string: `rltap.train` is imported only where a pack is made or merged.
EpisodeResult: TypeAlias = "dict[str, Any] | Interactions | TreePack | None"
Mode = Literal["inline", "subproc"]


@dataclass(slots=True)
class Episode:
    """What one agent run left: its session and exported interactions, or why it failed; with
    style "tree" also the session's pack (its interactions then as style individual's)."""

    session_id: str
    interactions: Interactions | None
    error: str | None = None
    pack: TreePack | None = None


@dataclass(frozen=True, kw_only=True)
class WorkflowSettings:
    """How `OpenAIProxyWorkflow` runs each episode and exports its session.

    `episodes` is `rltap.config`'s section itself: `mode`, `discount` and `episode_timeout`
    apply to every episode, and `concurrency` x `group_size` episodes are in flight at most,
    so a subprocess pool gets that many workers. The rest are the export's (`POST
    /export_trajectories`): `style`, `aggregate`, `discount_mode` ("tree": along the
    conversation tree; "chain": insertion order, AReaL's numbers), `link_factors`, `agents`;
    `return_tensors` makes `arun_episode` return a tensor dict instead of interactions.

    Usage:
        settings = WorkflowSettings(episodes=EpisodeConfig(discount=0.9), style="concat")
        settings = WorkflowSettings.of(config)  # `rltap rollout`'s (a RolloutConfig)
    """

    episodes: EpisodeConfig = field(default_factory=EpisodeConfig)
    style: ExportStyle = "individual"
    aggregate: Aggregate = "mean"
    discount_mode: DiscountMode = "tree"
    link_factors: LinkFactors | None = None
    agents: tuple[str, ...] | None = None
    return_tensors: bool = False

    def __post_init__(self) -> None:
        if self.episodes.mode not in ("inline", "subproc"):
            msg = f"mode must be 'inline' or 'subproc', got {self.episodes.mode!r}"
            raise WorkflowError(msg)
        # a typo fails here, not at every episode's export
        object.__setattr__(self, "link_factors", check_link_factors(self.link_factors))
        if self.agents is not None:
            object.__setattr__(self, "agents", tuple(self.agents))

    @classmethod
    def of(cls, config: RolloutConfig) -> WorkflowSettings:
        """The settings `rltap rollout` and `rltap train` (`TrainConfig.rollout()`) run with."""
        return cls(
            episodes=config.episodes,
            style=config.style,
            link_factors=dict(config.link_factors) if config.link_factors else None,
            agents=None if config.agents is None else tuple(config.agents),
        )

    @property
    def workers(self) -> int:
        """A subprocess pool's workers: one per episode in flight."""
        return self.episodes.concurrency * self.episodes.group_size


class RolloutWorkflow(abc.ABC):
    """One episode of one dataset row, returning a tensor dict, interactions, or None (rejected)."""

    @abc.abstractmethod
    async def arun_episode(self, engine: Any, data: Any) -> EpisodeResult: ...


class OpenAIProxyWorkflow(RolloutWorkflow):
    """Run `agent.run(data, ...)` in its own proxy session, then export the session.

    Usage:
        settings = WorkflowSettings(episodes=EpisodeConfig(discount=0.9), style="concat")
        workflow = OpenAIProxyWorkflow(MyAgent(), proxy_addr="http://127.0.0.1:8000",
                                       admin_key=key, settings=settings)
        interactions = await workflow.arun_episode(None, {"question": "2+2?"})

    What run() returns becomes the reward: a number rewards the last completed reply, a dict
    {interaction_id: reward} those replies, a dict {agent: reward} each agent's own calls, from
    its last reply back (`rltap.tree.reward_targets`; an agent left out gets 0, with a
    warning), None nothing (discounting gives zeros). An agent that raises, dies or times out
    rejects its episode (None); `failures` counts them. `settings` says how episodes run and
    are exported (`WorkflowSettings`; default: its defaults). `agent_pool` is a subprocess pool
    to share (its owner shuts it down; default: one of the workflow's own in mode "subproc");
    `http_client` the client to reach the proxy with (the caller's to close).
    """

    def __init__(
        self,
        agent: Any,
        *,
        proxy_addr: str,
        admin_key: str,
        settings: WorkflowSettings | None = None,
        agent_pool: AgentPool | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        settings = settings or WorkflowSettings()
        run = getattr(agent, "run", None)
        if not callable(run):
            msg = f"{type(agent).__name__} has no run(data, **kwargs) method"
            raise WorkflowError(msg)
        if settings.episodes.mode == "inline" and not inspect.iscoroutinefunction(run):
            msg = (
                f"{type(agent).__name__}.run is not async: inline mode awaits it in the event "
                "loop; make it `async def run(...)` or use mode='subproc'"
            )
            raise WorkflowError(msg)
        self.agent = agent
        self.proxy_addr = proxy_addr.rstrip("/")
        self.admin_key = admin_key
        self.settings = settings
        self.failures = 0
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=httpx.Timeout(3600.0, connect=30.0))
        # A pool passed in is shared (and shut down) by its owner: its workers outlive us.
        self._owns_pool = agent_pool is None
        subproc = settings.episodes.mode == "subproc"
        self._pool = (agent_pool or AgentPool(settings.workers)) if subproc else None

    @property
    def style(self) -> ExportStyle:
        return self.settings.style

    async def arun_episode(self, engine: Any, data: Any) -> EpisodeResult:
        episode = await self.run_episode(data)
        if episode.interactions is None:
            return None
        if episode.pack is not None:  # style "tree": the pack is the episode's tensors
            return episode.pack
        if self.settings.return_tensors:
            tensors = [i.to_tensor_dict() for i in episode.interactions.values()]
            return concat_padded_tensors(tensors)
        return episode.interactions

    async def run_episode(
        self, data: Any, task_id: str | None = None, sampling: EpisodeSampling | None = None
    ) -> Episode:
        """One episode with its session id; `interactions` is None when it was rejected.
        `sampling` sets the seed and temperature of the episode's calls (the session's)."""
        session = OpenAIProxyClient(
            self.proxy_addr,
            self.admin_key,
            task_id=task_id,
            sampling=sampling,
            http_client=self._http,
        )
        error: str | None = None
        reward_error: Exception | None = None
        scope: RewardScope = "episode"
        async with session:
            try:
                result = await self._run_agent(session, data)
            except (Exception, EpisodeFailed) as exc:
                self.failures += 1
                error = f"{type(exc).__name__}: {exc}"
                logger.warning("episode rejected: the agent failed: %s", error)
            else:
                try:
                    scope = await self._assign_rewards(session, result)
                except (WorkflowError, RltapError) as exc:
                    reward_error = exc  # raised below, once the session is freed
        # Exporting frees the session on the proxy, also for a rejected episode.
        settings = self.settings
        body = await session.export_trajectories(
            discount=settings.episodes.discount,
            style=settings.style,
            aggregate=settings.aggregate,
            link_factors=settings.link_factors,
            agents=None if settings.agents is None else list(settings.agents),
            discount_mode=settings.discount_mode,
            reward_scope=scope,
        )
        if reward_error is not None:
            raise reward_error
        assert session.session_id is not None
        if error is not None:
            return Episode(session_id=session.session_id, interactions=None, error=error)
        # The tree is decoded once: the interactions are cut out of that pack.
        pack = tree_from_export(body) if settings.style == "tree" else None
        exported = interactions_from_export(body, pack=pack)
        return Episode(session_id=session.session_id, interactions=exported, pack=pack)

    async def _run_agent(self, session: OpenAIProxyClient, data: Any) -> Any:
        assert session.api_key is not None
        if self._pool is not None:
            run = self._pool.run(self.agent, data, session.proxy_url, session.api_key)
        else:
            run = self.agent.run(
                data,
                base_url=session.base_url,
                api_key=session.api_key,
                http_client=self._http,
            )
        timeout = self.settings.episodes.episode_timeout
        if timeout is None:
            return await run
        try:
            async with asyncio.timeout(timeout) as deadline:
                return await run
        except TimeoutError:
            if not deadline.expired():
                raise  # the agent's own timeout
            msg = f"the episode ran past its timeout of {timeout:g} s"
            raise TimeoutError(msg) from None

    async def _assign_rewards(self, session: OpenAIProxyClient, result: Any) -> RewardScope:
        """Set the rewards `result` gives; "agent" when they are keyed by agent."""
        if result is None:
            logger.warning("agent returned None: no reward assigned (discounting gives zeros)")
        elif isinstance(result, numbers.Real) and not isinstance(result, bool):
            if not math.isfinite(float(result)):
                msg = f"agent returned a non-finite reward {result}"
                raise WorkflowError(msg)
            await session.set_last_reward(float(result))
        elif isinstance(result, Mapping):
            # One request: the proxy knows the episode's ids and agents, and sets all or none.
            placed = await session.set_rewards({str(key): value for key, value in result.items()})
            if placed["keyed_by"] == "agent":
                for agent in placed["missing_agents"]:
                    logger.warning("agent.run gave agent %r no reward: its calls get 0", agent)
                return "agent"
        else:
            kind = type(result).__name__
            msg = f"agent.run returned {kind}; return a number (reward of the last reply), a dict"
            raise WorkflowError(msg + " {interaction_id: reward} or {agent: reward}, or None")
        return "episode"

    async def aclose(self) -> None:
        if self._pool is not None and self._owns_pool:
            self._pool.shutdown()
        if self._owns_http:  # a client the caller passed in stays theirs to close
            await self._http.aclose()


class GroupedRolloutWorkflow(RolloutWorkflow):
    """`group_size` episodes of the same row, concurrently; the results merged.

    Tensor dicts are stacked along the batch (right-padded to the longest), interaction dicts
    merged by id, tree packs merged into one trie (`merge_tries`); rejected episodes are dropped;
    None when every episode was rejected.
    """

    def __init__(self, workflow: RolloutWorkflow, group_size: int) -> None:
        if group_size < 1:
            msg = f"group_size must be >= 1, got {group_size}"
            raise WorkflowError(msg)
        self.workflow = workflow
        self.group_size = group_size

    async def arun_episode(self, engine: Any, data: Any) -> EpisodeResult:
        results = await asyncio.gather(
            *(self.workflow.arun_episode(engine, data) for _ in range(self.group_size))
        )
        return merge_results([r for r in results if r is not None])


def merge_results(results: list[Any]) -> EpisodeResult:

    if not results:
        return None
    packs = [result for result in results if isinstance(result, TreePack)]
    if packs:
        if len(packs) < len(results):
            msg = "cannot merge tree packs with other results in one group"
            raise WorkflowError(msg)
        return merge_tries(packs)
    # An episode without LLM calls exports an empty dict (of either kind): nothing to merge.
    filled = [result for result in results if len(result) > 0]
    if filled and all(_is_tensor_dict(r) for r in filled):
        return concat_padded_tensors(filled)
    merged: Interactions = {}
    for result in filled:
        if _is_tensor_dict(result):
            msg = "cannot merge tensor dicts with interaction dicts in one group"
            raise WorkflowError(msg)
        merged.update(result)
    return merged


def _is_tensor_dict(result: Any) -> bool:
    return (
        isinstance(result, Mapping)
        and "input_ids" in result
        and hasattr(result["input_ids"], "shape")
    )


def resolve_workflow(
    workflow: Any,
    workflow_kwargs: Mapping[str, Any] | None = None,
    group_size: int = 1,
    proxy_addr: str | None = None,
    *,
    admin_key: str | None = None,
    settings: WorkflowSettings | None = None,
    agent_pool: AgentPool | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> RolloutWorkflow:
    """A `RolloutWorkflow` from an instance, a class, or a dotted/file path to one.

    Agents (anything with a `run` method that is not a RolloutWorkflow) are wrapped in
    `OpenAIProxyWorkflow(agent, proxy_addr=..., admin_key=..., settings=..., agent_pool=...,
    http_client=...)`.
    """
    if group_size < 1:
        msg = f"group_size must be >= 1, got {group_size}"
        raise WorkflowError(msg)
    kwargs = dict(workflow_kwargs or {})
    if isinstance(workflow, str):
        workflow = load_object(workflow)
    if isinstance(workflow, type):
        if not (issubclass(workflow, RolloutWorkflow) or hasattr(workflow, "run")):
            msg = f"{workflow.__name__} is neither a RolloutWorkflow nor an agent with run()"
            raise WorkflowError(msg)
        workflow = workflow(**kwargs)
    if not isinstance(workflow, RolloutWorkflow):
        if not hasattr(workflow, "run"):
            msg = f"{type(workflow).__name__} is neither a RolloutWorkflow nor has run(data)"
            raise WorkflowError(msg)
        if proxy_addr is None or admin_key is None:
            msg = "an agent needs proxy_addr and admin_key to run against the proxy"
            raise WorkflowError(msg)
        workflow = OpenAIProxyWorkflow(
            workflow,
            proxy_addr=proxy_addr,
            admin_key=admin_key,
            settings=settings,
            agent_pool=agent_pool,
            http_client=http_client,
        )
    resolved: RolloutWorkflow = workflow
    if group_size > 1:
        return GroupedRolloutWorkflow(resolved, group_size)
    return resolved
