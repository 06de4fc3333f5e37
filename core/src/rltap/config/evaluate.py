"""`rltap eval`'s settings (`EvalConfig`: a rollout's, plus how the samples are drawn and
scored) and the held-out evaluation of `rltap train --eval-data` (`TrainEvalConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rltap.config.flags import ConfigError, option, section
from rltap.config.rollout import RolloutConfig

__all__ = ["EvalConfig", "PassConfig", "ScoringConfig", "TrainEvalConfig"]


@dataclass(frozen=True, kw_only=True)
class PassConfig:
    """When a sample counts as solved, for pass@k."""

    pass_threshold: float = option(1.0, "a sample passes when its reward is >= this (default 1.0)")


@dataclass(frozen=True, kw_only=True)
class ScoringConfig:
    """How `rltap eval` samples: the agents' temperature, forced on every call."""

    temperature: float = option(
        1.0, "every call's sampling T, whatever T the agent asks for (default 1.0)"
    )
    greedy: bool = option(False, "decode greedily (temperature 0)")
    passing: PassConfig = section(PassConfig)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError("--temperature must be >= 0")

    @property
    def sampling_temperature(self) -> float:
        return 0.0 if self.greedy else self.temperature


@dataclass(frozen=True, kw_only=True)
class EvalConfig(RolloutConfig):
    """`rltap eval`: AGENT on every row of --data, --group-size K samples a row: mean reward and
    pass@1 .. pass@K, the table printed and `eval.json` in --out."""

    scoring: ScoringConfig = section(ScoringConfig, "evaluation")


@dataclass(frozen=True, kw_only=True)
class TrainEvalConfig:
    """`rltap train`'s held-out evaluation: every --eval-every steps and before the first."""

    eval_data: str | None = option(
        None, "held-out JSONL rows, evaluated before step 1 (as step 0) and every --eval-every"
    )
    eval_every: int = option(5, "steps between evaluations (default %(default)s)")
    eval_samples: int = option(1, "episodes per held-out row (default %(default)s)")
    eval_temperature: float = option(
        0.0, "the evaluation's sampling T (default %(default)s: greedy)"
    )
    passing: PassConfig = section(PassConfig)

    def __post_init__(self) -> None:
        if self.eval_every < 1 or self.eval_samples < 1:
            raise ConfigError("--eval-every and --eval-samples must be at least 1")
        if self.eval_temperature < 0:
            raise ConfigError("--eval-temperature must be >= 0")
