"""rltap's settings as dataclasses, one field per setting with its default and help once; the
command line's flags and `--config` files are derived from them (`rltap.config.flags`).

    serve     ServeConfig (engine, chat and session defaults, limits, store, launch), ServerConfig
    launch    LaunchConfig: the engine servers rltap starts (--launch)
    rollout   RolloutConfig: AgentTask + EpisodeConfig + export + ServeConfig + RayConfig
    train     TrainConfig: AgentTask + LoopConfig + UpdateConfig + LoraConfig
              + RanksConfig + PrecisionConfig + ServeConfig + RayConfig;
              PolicyConfig: a LoRA adapter per group of agents (`[policies]`)
    eval      EvalConfig: RolloutConfig + ScoringConfig; TrainEvalConfig (train --eval-data)
    demo      DemoConfig

Imports only rltap's data modules, so anything may import it; every config pickles (a Ray
rollout actor is given its `RolloutConfig`).
"""

from __future__ import annotations

from rltap.config.demo import DemoConfig
from rltap.config.evaluate import EvalConfig, PassConfig, ScoringConfig, TrainEvalConfig
from rltap.config.flags import ConfigError, add_arguments, from_namespace, parse
from rltap.config.launch import LaunchConfig
from rltap.config.policies import PolicyConfig
from rltap.config.rollout import AgentTask, EpisodeConfig, RayConfig, RolloutConfig
from rltap.config.serve import (
    ChatConfig,
    EngineConfig,
    LimitsConfig,
    ServeConfig,
    ServerConfig,
    StoreConfig,
)
from rltap.config.train import (
    LoopConfig,
    LoraConfig,
    PrecisionConfig,
    RanksConfig,
    TrainConfig,
    UpdateConfig,
)

__all__ = [
    "AgentTask",
    "ChatConfig",
    "ConfigError",
    "DemoConfig",
    "EngineConfig",
    "EpisodeConfig",
    "EvalConfig",
    "LaunchConfig",
    "LimitsConfig",
    "LoopConfig",
    "LoraConfig",
    "PassConfig",
    "PolicyConfig",
    "PrecisionConfig",
    "RanksConfig",
    "RayConfig",
    "RolloutConfig",
    "ScoringConfig",
    "ServeConfig",
    "ServerConfig",
    "StoreConfig",
    "TrainConfig",
    "TrainEvalConfig",
    "UpdateConfig",
    "add_arguments",
    "from_namespace",
    "parse",
]
