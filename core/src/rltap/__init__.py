"""rltap: token-level capture of agent LLM calls for agentic reinforcement learning."""

from __future__ import annotations

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
    "InteractionStatus",
    "InteractionWithTokenLogpReward",
    "LogprobConvention",
    "ModelRequest",
    "ModelResponse",
    "StopReason",
    "TokenChunk",
    "TokenSequence",
]
