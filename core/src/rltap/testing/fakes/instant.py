"""An in-process engine that answers at once with fixed tokens: only the proxy's cost remains.

Usage:
    engine = InstantEngine(tokenizer.encode("Hello."), end_id=renderer.end_of_turn_ids[-1])
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from rltap.record.types import (
    LogprobConvention,
    ModelRequest,
    ModelResponse,
    StopReason,
    TokenChunk,
)

__all__ = ["InstantEngine"]


class InstantEngine:
    """Replies with `reply_ids` (then end of turn) immediately; logprobs are a constant."""

    logprob_convention = LogprobConvention.RAW

    def __init__(self, reply_ids: list[int], end_id: int) -> None:
        self._ids = [*reply_ids, end_id]
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def set_version(self, version: int) -> None:
        self._version = version

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def abort(self, request_id: str) -> None:
        return None

    async def generate(self, request: ModelRequest) -> ModelResponse:
        ids = self._ids[: request.max_new_tokens]
        return ModelResponse(
            input_tokens=request.input_ids,
            output_tokens=ids,
            output_logprobs=[-0.5] * len(ids),
            output_versions=[self._version] * len(ids),
            stop_reason=StopReason.STOP,
            logprob_convention=self.logprob_convention,
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[TokenChunk]:
        response = await self.generate(request)
        yield TokenChunk(
            token_ids=response.output_tokens,
            logprobs=response.output_logprobs,
            versions=response.output_versions,
            stop_reason=response.stop_reason,
        )
