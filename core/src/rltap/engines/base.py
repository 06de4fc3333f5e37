"""The protocol every inference engine implements, and the base class rltap's engines share."""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from typing import Protocol, runtime_checkable

from rltap.record.types import LogprobConvention, ModelRequest, ModelResponse, TokenChunk

__all__ = ["EngineBase", "InferenceEngine"]


@runtime_checkable
class InferenceEngine(Protocol):
    """Token ids in, token ids with logprobs and policy versions out.

    `stream` yields `TokenChunk`s as tokens are produced; the last chunk carries the stop reason.
    Closing the stream early (`aclose`, or cancelling the task consuming it) aborts the request
    and frees its slot. `generate` is `stream` collected into one `ModelResponse`. Failures raise
    `rltap.record.errors.EngineError` (or a subclass) with `is_retryable` set.
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

    def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]: ...

    async def abort(self, request_id: str) -> None:
        """Stop a request in flight; a no-op when it already finished."""
        ...

    async def start(self) -> None:
        """Acquire resources (load weights, open connections). Idempotent."""
        ...

    async def close(self) -> None: ...


class EngineBase(ABC):
    """What rltap's engines share: the policy-version counter stamped on the tokens they hand
    out, and `generate` as `stream` collected (an engine with a cheaper one-shot call overrides
    it). A subclass implements `stream`, `abort`, `start` and `close`."""

    logprob_convention: LogprobConvention

    def __init__(self, *, version: int = 0) -> None:
        self._version = version

    @property
    def version(self) -> int:
        """The policy version stamped on tokens generated from now on."""
        return self._version

    def set_version(self, version: int) -> None:
        """Declare the policy version after a trainer pushed new weights."""
        self._version = version

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Run `request` to completion: `stream` collected into one response."""
        started = time.perf_counter()
        response = ModelResponse(
            input_tokens=list(request.input_ids),
            logprob_convention=self.logprob_convention,
            constrained=request.constraint is not None,
        )
        async with contextlib.aclosing(self.stream(request)) as chunks:
            async for chunk in chunks:
                response.extend(chunk)
        response.latency = time.perf_counter() - started
        return response

    @abstractmethod
    def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        """Yield `request`'s tokens as they are produced; the last chunk has the stop reason."""

    @abstractmethod
    async def abort(self, request_id: str) -> None:
        """Stop a request in flight; a no-op when it already finished."""

    @abstractmethod
    async def start(self) -> None:
        """Acquire resources (load weights, open connections). Idempotent."""

    @abstractmethod
    async def close(self) -> None:
        """Release what `start` acquired; requests in flight end."""
