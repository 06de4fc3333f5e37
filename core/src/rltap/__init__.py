"""rltap: token-level capture of agent LLM calls for agentic reinforcement learning.

The seed's names are importable from here: `ArealOpenAI` (AReaL's client, `rltap.areal`'s),
`InteractionWithTokenLogpReward`, and rltap's own `OpenAIProxyClient` and `OpenAIProxyWorkflow`
(one `WorkflowSettings`, tree discount; `rltap.areal` has them with AReaL's signatures). Names whose
modules pull in the HTTP stack are imported on first use, so `import rltap` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltap import _moved
from rltap._lazy import lazy_getattr
from rltap.record.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    LogprobConvention,
    ModelRequest,
    ModelResponse,
    StopReason,
    TokenChunk,
    TokenSequence,
)
from rltap.tree.cache import InteractionCache
from rltap.tree.export import concat_padded_tensors

if TYPE_CHECKING:
    from rltap.areal.client import ArealOpenAI
    from rltap.client import OpenAIProxyClient
    from rltap.client.direct import DirectOpenAI
    from rltap.rollout.workflow import (
        GroupedRolloutWorkflow,
        OpenAIProxyWorkflow,
        RolloutWorkflow,
        WorkflowSettings,
        resolve_workflow,
    )

__all__ = [
    "ArealOpenAI",
    "DirectOpenAI",
    "GroupedRolloutWorkflow",
    "InteractionCache",
    "InteractionStatus",
    "InteractionWithTokenLogpReward",
    "Link",
    "LogprobConvention",
    "ModelRequest",
    "ModelResponse",
    "OpenAIProxyClient",
    "OpenAIProxyWorkflow",
    "RolloutWorkflow",
    "StopReason",
    "TokenChunk",
    "TokenSequence",
    "WorkflowSettings",
    "concat_padded_tensors",
    "resolve_workflow",
]

_LAZY = {
    "ArealOpenAI": "rltap.areal.client",
    "DirectOpenAI": "rltap.client.direct",
    "OpenAIProxyClient": "rltap.client.proxy",
    "GroupedRolloutWorkflow": "rltap.rollout.workflow",
    "OpenAIProxyWorkflow": "rltap.rollout.workflow",
    "RolloutWorkflow": "rltap.rollout.workflow",
    "WorkflowSettings": "rltap.rollout.workflow",
    "resolve_workflow": "rltap.rollout.workflow",
}

_moved.install()

__getattr__ = lazy_getattr("rltap", globals(), _LAZY)
