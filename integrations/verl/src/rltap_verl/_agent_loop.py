"""`RltapAgentLoop`: verl's agent loop running an rltap agent, one episode per `run`.

verl's agent-loop worker builds the loop per sample (hydra instantiate of its registry entry)
and awaits `run(sampling_params, **row)`. The loop runs the configured rltap agent through
`OpenAIProxyWorkflow` against its worker's rltap proxy (`rltap_verl._worker`), whose engine is
verl's own server manager (`VerlServerEngine`), then returns the session's branches as
`list[AgentLoopOutput]` (`rltap_verl._outputs`). A list is what verl's V1 worker
(`AgentLoopWorkerTQ`, `trainer.use_v1=True`, verl 0.9's default) takes; the legacy worker takes
one output per run, so the loop refuses to be built under it.

A failed episode (the agent raised, timed out, or made no LLM call) gives one inert output;
`max_failed_in_a_row` of them in a row in one worker raise `AllEpisodesFailed` instead.

Usage (the agent-loop YAML verl's `agent_loop_config_path` names):
    - name: rltap_agent
      _target_: rltap_verl.RltapAgentLoop
      rltap:
        agent: examples/langchain_math/agent.py:Agent
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopOutput,
    DictConfigWrap,
    register,
)

from rltap.adapter import check_framework
from rltap.config import ConfigError
from rltap.record.errors import RltapError
from rltap.record.sampling import EpisodeSampling
from rltap.rollout.branches import episode_branches
from rltap.rollout.workflow import Episode, WorkflowError
from rltap_verl._engine import ServerManager
from rltap_verl._outputs import branch_output, inert_output
from rltap_verl._requirements import VERL_REQUIREMENT
from rltap_verl._settings import RltapSettings
from rltap_verl._worker import WorkerProxy, start_worker_proxy, worker_proxy

__all__ = ["AGENT_NAME", "RltapAgentLoop"]

# The name verl's datasets (`agent_name`) and `rollout.agent.default_agent_loop` use.
AGENT_NAME = "rltap_agent"


class RltapAgentLoop(AgentLoopBase):
    """An rltap agent as a verl agent loop (settings: `RltapSettings`, from the `rltap`
    mapping of its YAML entry, then the `rltap:` section of verl's config).

    verl passes its trainer config, server manager, tokenizer, processor, dataset class and
    data config, and whatever else its YAML entry holds; `rltap` is the plugin's.
    """

    def __init__(
        self,
        trainer_config: DictConfigWrap,
        server_manager: ServerManager,
        tokenizer: Any,
        processor: Any,
        dataset_cls: Any,
        data_config: DictConfigWrap,
        rltap: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.verl_version = check_framework(VERL_REQUIREMENT)
        # verl types the manager as its LLMServerClient; any object with its `generate`
        # signature serves (tests pass one answering with a tiny model).
        super().__init__(
            trainer_config,
            server_manager,  # type: ignore[arg-type]
            tokenizer,
            processor,
            dataset_cls,
            data_config,
            **kwargs,
        )
        if not self.config.trainer.get("use_v1", False):
            msg = (
                f"{AGENT_NAME} returns one AgentLoopOutput per branch of an episode, which only "
                "verl's V1 agent-loop worker takes: set trainer.use_v1=True"
            )
            raise ConfigError(msg)
        self.settings = RltapSettings.of(_plain(rltap), _plain(self.config.get("rltap")))

    # verl's base declares one output; its V1 worker takes a list (one per branch).
    async def run(  # type: ignore[override]
        self, sampling_params: dict[str, Any], **kwargs: Any
    ) -> list[AgentLoopOutput]:
        """One episode of the row `kwargs`: its branches, or one inert output if it failed."""
        proxy = await worker_proxy(self.server_manager, self.settings, self._start_proxy)
        runner = proxy.runner(self.settings)
        started = time.perf_counter()
        data = self._episode_data(kwargs)
        try:
            episode = await runner.workflow.run_episode(data, sampling=_sampling(sampling_params))
        except (WorkflowError, RltapError) as exc:
            # The agent's result could not become rewards (a reply left unrewardable, a reward
            # of the wrong type): the episode failed like one whose agent raised.
            episode = Episode(
                session_id="", interactions=None, error=f"{type(exc).__name__}: {exc}"
            )
        branches = episode_branches(episode)
        if not branches:
            error = episode.error or "the agent made no LLM call"
            runner.streak.failed(error)  # raises AllEpisodesFailed at the limit
            tokenizer: Any = self.tokenizer
            pad = tokenizer.pad_token_id
            return [
                inert_output(
                    pad_token_id=int(tokenizer.eos_token_id if pad is None else pad),
                    error=error,
                    version=proxy.engine.version,
                    session_id=episode.session_id or None,
                )
            ]
        runner.streak.succeeded()
        seconds = time.perf_counter() - started
        return [branch_output(branch, seconds=seconds) for branch in branches]

    async def _start_proxy(self) -> WorkerProxy:
        rollout = OmegaConf.to_container(self.rollout_config, resolve=True)
        assert isinstance(rollout, dict)
        return await start_worker_proxy(
            server_manager=self.server_manager,
            tokenizer=self.tokenizer,
            rollout={str(key): value for key, value in rollout.items()},
            model_path=self.config.actor_rollout_ref.model.get("path"),
            settings=self.settings,
        )

    def _episode_data(self, row: dict[str, Any]) -> Any:
        key = self.settings.data_key
        if key is None:
            return row
        if key not in row:
            msg = f"rltap.data_key {key!r} is not a column of the row; it has {sorted(row)}"
            raise ConfigError(msg)
        return row[key]


def _sampling(sampling_params: Mapping[str, Any]) -> EpisodeSampling | None:
    # verl's rollout temperature (greedy when it validates) is every call's: its actor scores
    # the tokens at that temperature, whatever the agent's code asks for.
    temperature = sampling_params.get("temperature")
    return None if temperature is None else EpisodeSampling(temperature=float(temperature))


def _plain(section: Any) -> Mapping[str, Any] | None:
    if section is None:
        return None
    if isinstance(section, DictConfig):
        container = OmegaConf.to_container(section, resolve=True)
        assert isinstance(container, dict)
        return {str(key): value for key, value in container.items()}
    if isinstance(section, Mapping):
        return section
    msg = f"the rltap settings must be a mapping, got {type(section).__name__}"
    raise ConfigError(msg)


register(AGENT_NAME)(RltapAgentLoop)
