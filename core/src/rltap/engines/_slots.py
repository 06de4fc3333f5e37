"""The embedded engine's bookkeeping for one request: its slot in the batch, what it emitted, and
the mailbox the decode loop fills for its stream."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rltap.engines._grammar import RequestGrammar
from rltap.engines._sampling import RowSampler, StopCriteria
from rltap.record.errors import ContextLengthExceeded, EngineError, InvalidRequest
from rltap.record.types import ModelRequest, StopReason, TokenChunk

__all__ = ["Emission", "Mailbox", "Slot", "abort_chunk", "merge_chunks", "new_slot"]


class Mailbox:
    """What the decode loop has produced for one stream and the stream has not taken yet."""

    def __init__(self) -> None:
        self._items: deque[TokenChunk | BaseException] = deque()
        self._ready = asyncio.Event()

    def put(self, item: TokenChunk | BaseException) -> None:
        self._items.append(item)
        self._ready.set()

    async def take_all(self) -> list[TokenChunk | BaseException]:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        items = list(self._items)
        self._items.clear()
        return items


@dataclass(eq=False, kw_only=True)
class Slot:
    request: ModelRequest
    sampler: RowSampler
    stops: StopCriteria
    grammar: RequestGrammar | None = None  # the request's constraint, followed token by token
    mailbox: Mailbox = field(default_factory=Mailbox)
    output_ids: list[int] = field(default_factory=list)
    finished: bool = False  # no more tokens will be produced (set from either thread)
    closed: bool = False  # the final chunk (or error) is in the mailbox

    @property
    def context_ids(self) -> list[int]:
        return self.request.input_ids + self.output_ids

    @property
    def error(self) -> BaseException | None:
        """Why this request failed on its own (its grammar broke), or None."""
        return None if self.grammar is None else self.grammar.error

    def record(self, token: int) -> StopReason | None:
        """Append a sampled token and advance the grammar; the stop reason, or None."""
        self.output_ids.append(token)
        reason = self.stops.check(self.output_ids)
        grammar = self.grammar
        if grammar is None:
            return reason
        if reason is None:
            grammar.advance(token)
            if grammar.complete:
                reason = StopReason.STOP
        return StopReason.STOP if grammar.error is not None else reason


def new_slot(
    request: ModelRequest,
    *,
    context_limit: int,
    vocab_size: int,
    eos_ids: Sequence[int],
    tokenizer: Any,
    device: torch.device,
) -> Slot:
    """The slot of `request`, which must fit the engine's context and vocabulary (and have a
    tokenizer for its stop strings): the error a client sees otherwise."""
    n = len(request.input_ids)
    if n >= context_limit:
        msg = f"prompt has {n} tokens; the context limit is {context_limit}"
        raise ContextLengthExceeded(msg, param="messages")
    if not all(isinstance(t, int) and 0 <= t < vocab_size for t in request.input_ids):
        msg = f"input_ids must be integers in [0, {vocab_size})"
        raise InvalidRequest(msg, param="input_ids")
    if request.stop and tokenizer is None:
        msg = "stop strings need a tokenizer; this engine was started without one"
        raise EngineError(msg)
    stops = StopCriteria(
        prompt_len=n,
        max_new_tokens=request.max_new_tokens,
        context_limit=context_limit,
        stop_token_ids=[*eos_ids, *request.stop_token_ids],
        stop_strings=request.stop,
        tokenizer=tokenizer,
    )
    return Slot(request=request, sampler=RowSampler.for_request(request, device), stops=stops)


@dataclass(slots=True)
class Emission:
    slot: Slot
    token: int
    logprob: float
    version: int
    stop_reason: StopReason | None

    def chunk(self) -> TokenChunk:
        return TokenChunk(
            token_ids=[self.token],
            logprobs=[self.logprob],
            versions=[self.version],
            stop_reason=self.stop_reason,
        )


def merge_chunks(chunks: Sequence[TokenChunk]) -> TokenChunk:
    if len(chunks) == 1:
        return chunks[0]
    merged = TokenChunk(token_ids=[], logprobs=[], versions=[])
    for chunk in chunks:
        merged.token_ids.extend(chunk.token_ids)
        merged.logprobs.extend(chunk.logprobs)
        merged.versions.extend(chunk.versions)
        merged.stop_reason = chunk.stop_reason or merged.stop_reason
    return merged


def abort_chunk() -> TokenChunk:
    return TokenChunk(token_ids=[], logprobs=[], versions=[], stop_reason=StopReason.ABORT)
