"""rltap's settings inside verl: which agent runs, how its episodes are rewarded and bounded.

They live in verl's own config, in one of two places (both may be used; the first wins key by
key):

1. the `rltap:` mapping of the agent loop's entry in the YAML file verl's
   `actor_rollout_ref.rollout.agent.agent_loop_config_path` names (integrations/verl/
   rltap_agent.yaml; verl passes the entry's keys to the agent loop);
2. a top-level `rltap:` section of verl's trainer config (`+rltap.agent=...` on
   `python -m verl.trainer.main_ppo`'s command line), read by the registered `rltap_agent`.

Usage:
    settings = RltapSettings.of({"agent": "examples/langchain_math/agent.py:Agent"})
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rltap.config import ChatConfig, ConfigError, EngineConfig, EpisodeConfig, ServeConfig

__all__ = ["RltapSettings"]


@dataclass(frozen=True, kw_only=True)
class RltapSettings:
    """What the agent loop runs, and how.

    - `agent`: the rltap agent, "pkg.module:Name" or "path/file.py:Name" (a class, built with
      `agent_kwargs`, or an instance), with `async def run(data, **kwargs)`;
    - `data_key`: the dataset column handed to the agent as `data` (None: the whole row as
      verl passes it, every column of the parquet file included);
    - `discount`: the turn discount along the conversation tree (rltap's export);
    - `episode_timeout`: seconds an episode may run before it counts as failed (None: no limit);
    - `max_failed_in_a_row`: this many failed episodes in a row in one worker, with no episode
      succeeding in between, raise `AllEpisodesFailed` (a broken agent is an error, not a run of
      zero rewards);
    - `tokenizer`: a tokenizer folder of rltap's own to render with; it must give the ids verl's
      does (`check_same_tokenizer`). None: verl's tokenizer;
    - `chat_template_mode`, `tool_parser`, `reasoning_parser`: the proxy's chat rendering
      (`rltap.config.ChatConfig`).
    """

    agent: str
    agent_kwargs: Mapping[str, Any] = field(default_factory=dict)
    data_key: str | None = None
    discount: float = 1.0
    # Bounded by default: one stuck agent would otherwise hold verl's whole step.
    episode_timeout: float | None = 600.0
    max_failed_in_a_row: int = 16
    tokenizer: str | None = None
    chat_template_mode: str = "concat"
    tool_parser: str | None = "hermes"
    reasoning_parser: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.agent, str) or ":" not in self.agent:
            msg = (
                f"rltap.agent must be 'pkg.module:Name' or 'path/file.py:Name', got {self.agent!r}"
            )
            raise ConfigError(msg)
        if not (math.isfinite(self.discount) and 0.0 <= self.discount <= 1.0):
            msg = f"rltap.discount must be in [0, 1], got {self.discount}"
            raise ConfigError(msg)
        if self.episode_timeout is not None and not self.episode_timeout > 0:
            timeout = self.episode_timeout
            msg = f"rltap.episode_timeout must be positive seconds or null, got {timeout}"
            raise ConfigError(msg)
        if self.max_failed_in_a_row < 1:
            msg = f"rltap.max_failed_in_a_row must be at least 1, got {self.max_failed_in_a_row}"
            raise ConfigError(msg)
        # The chat section checks its own values (the mode's choices) now, not at first use.
        self.chat_config(max_context=1, max_tokens=1)

    @classmethod
    def of(cls, *sources: Mapping[str, Any] | None) -> RltapSettings:
        """The settings from `sources`, the first naming a key winning; an unknown key or a
        missing `agent` raises `ConfigError`."""
        known = {f.name for f in dataclasses.fields(cls)}
        merged: dict[str, Any] = {}
        for source in reversed([s for s in sources if s]):
            unknown = sorted(set(source) - known)
            if unknown:
                msg = f"unknown rltap setting {unknown[0]!r}; the settings are {sorted(known)}"
                raise ConfigError(msg)
            merged.update(source)
        if "agent" not in merged:
            msg = (
                "rltap.agent is not set: name the agent in the agent loop's YAML entry "
                "(rltap: {agent: ...}) or with +rltap.agent=pkg.module:Name"
            )
            raise ConfigError(msg)
        merged["agent_kwargs"] = dict(merged.get("agent_kwargs") or {})
        return cls(**merged)

    @property
    def rendering(self) -> tuple[str | None, ...]:
        """The settings the proxy itself is built from (agents of equal ones share it)."""
        return (self.tokenizer, self.chat_template_mode, self.tool_parser, self.reasoning_parser)

    def episode_config(self) -> EpisodeConfig:
        """The episodes' section: inline in the worker's event loop, one at a time per call."""
        return EpisodeConfig(discount=self.discount, episode_timeout=self.episode_timeout)

    def chat_config(self, *, max_context: int, max_tokens: int) -> ChatConfig:
        """The proxy's rendering, bounded as verl bounds a sequence (`max_context`) and a
        reply (`max_tokens`, when a call sets none)."""
        return ChatConfig(
            chat_template_mode=self.chat_template_mode,  # type: ignore[arg-type]
            tool_parser=self.tool_parser,
            reasoning_parser=self.reasoning_parser,
            max_context=max_context,
            default_max_tokens=max_tokens,
        )

    def serve_config(self, *, tokenizer_dir: str, max_context: int, max_tokens: int) -> ServeConfig:
        """The proxy's settings: rendering with the tokenizer in `tokenizer_dir` (the engine is
        the plugin's own, given to `ServeSetup.load`)."""
        return ServeConfig(
            engine=EngineConfig(tokenizer=tokenizer_dir),
            chat=self.chat_config(max_context=max_context, max_tokens=max_tokens),
        )
