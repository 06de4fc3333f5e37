"""The protocol every inference engine implements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from rltap.types import LogprobConvention, ModelRequest, ModelResponse, TokenChunk

__all__ = ["InferenceEngine"]


@runtime_checkable
class InferenceEngine(Protocol):
    """Token ids in, token ids with logprobs and policy versions out.

    `stream` yields `TokenChunk`s as tokens are produced; the last chunk carries the stop reason.
    Closing the stream early (or cancelling the task consuming it) aborts the request and frees
    its slot. `generate` is `stream` collected into one `ModelResponse`. Failures raise
    `rltap.errors.EngineError` (or a subclass) with `is_retryable` set.
    """

    logprob_convention: LogprobConvention

    @property
    def version(self) -> int:
        """The policy version new tokens are generated with."""
        ...

    def set_version(self, version: int) -> None:
        """Declare the policy version after a trainer pushed new weights."""
        ...

    async def generate(self, request: ModelRequest) -> ModelResponse: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[TokenChunk]: ...

    async def abort(self, request_id: str) -> None:
        """Stop a request in flight; a no-op when it already finished."""
        ...

    async def start(self) -> None:
        """Acquire resources (load weights, open connections). Idempotent."""
        ...

    async def close(self) -> None: ...
