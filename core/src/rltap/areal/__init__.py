"""AReaL 1.0.4's agentic API on rltap: `areal.experimental.openai` with the import path changed.

    from rltap.areal import ArealOpenAI, OpenAIProxyClient, OpenAIProxyWorkflow

Constructors, defaults, parser names, exception types and the reward contract are AReaL's
(chain discount, applied once); `rltap`'s own names keep rltap's (tree discount). The
submodules mirror AReaL's: `rltap.areal.cache`, `.types`, `.client`, `.proxy`, and
`rltap.areal.io_struct` for `areal.api.io_struct`'s `ModelRequest` / `ModelResponse`.
`docs/switching-from-areal.md` lists every difference that remains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltap._lazy import lazy_getattr
from rltap.areal.cache import InteractionCache
from rltap.areal.io_struct import GenerationHyperparameters, ModelRequest, ModelResponse
from rltap.areal.types import InteractionWithTokenLogpReward

if TYPE_CHECKING:
    from rltap.areal.client import ArealOpenAI
    from rltap.areal.engine import ArealEngine
    from rltap.areal.proxy import OpenAIProxyClient, OpenAIProxyWorkflow
    from rltap.rollout.workflow import RolloutWorkflow

__all__ = [
    "ArealEngine",
    "ArealOpenAI",
    "GenerationHyperparameters",
    "InteractionCache",
    "InteractionWithTokenLogpReward",
    "ModelRequest",
    "ModelResponse",
    "OpenAIProxyClient",
    "OpenAIProxyWorkflow",
    "RolloutWorkflow",
]

# The client pulls in the SDK and the chat stack, the proxy names httpx: loaded on first use.
_LAZY = {
    "ArealEngine": "rltap.areal.engine",
    "ArealOpenAI": "rltap.areal.client",
    "OpenAIProxyClient": "rltap.areal.proxy",
    "OpenAIProxyWorkflow": "rltap.areal.proxy",
    "RolloutWorkflow": "rltap.rollout.workflow",
}

__getattr__ = lazy_getattr("rltap.areal", globals(), _LAZY)
