"""rltap: token-level capture of agent LLM calls for agentic reinforcement learning."""

from __future__ import annotations

from rltap.cache import InteractionCache
from rltap.export import concat_padded_tensors
from rltap.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    LogprobConvention,
    ModelRequest,
    ModelResponse,
    StopReason,
    TokenChunk,
    TokenSequence,
)

__all__ = [
    "InteractionCache",
    "InteractionStatus",
    "InteractionWithTokenLogpReward",
    "LogprobConvention",
    "ModelRequest",
    "ModelResponse",
    "StopReason",
    "TokenChunk",
    "TokenSequence",
    "concat_padded_tensors",
]
