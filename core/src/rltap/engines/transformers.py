"""The embedded engine: a Hugging Face causal LM with its own batched KV-cache decode loop.

One background task drives the loop. Each iteration, on the engine's worker thread: drop finished
rows, prefill the requests that arrived since the last step (together, in as few left-padded
forwards as the prefill budgets allow, see `_prefill`), splice them into the left-padded batch
cache (`_batcher`), run one decode forward over every row, sample one token per row with that
request's own generator and check its stop criteria. The event loop only hands out the tokens,
so it stays free for the proxy while the model runs.

A request with a `Constraint` gets its own llguidance matcher (`_grammar`): each step its row's
logits are masked to the tokens the grammar allows before sampling, the sampled token advances
the matcher, and an end token is allowed only where the grammar accepts. The recorded logprob is
still the unmasked log_softmax (see `LogprobConvention`); rows without a grammar cost nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

import torch

from rltap.config.serve import MAX_PREFILL_TOKENS
from rltap.engines._adapters import AdapterRouter
from rltap.engines._batcher import KVBatch, check_cache_layout
from rltap.engines._grammar import GrammarTokenizer
from rltap.engines._hf import (
    ModelHost,
    ModelSource,
    TokenizerSource,
    cache_kwarg,
    context_limit,
    default_eos_ids,
    weight_loader,
)
from rltap.engines._prefill import admit, check_sizes
from rltap.engines._sampling import MaskWorker, sample_rows
from rltap.engines._slots import Emission, Slot, abort_chunk, merge_chunks, new_slot
from rltap.engines.base import AdapterWeights, EngineBase, WeightSource
from rltap.record.errors import Conflict, EngineError, EngineUnavailable, RltapError
from rltap.record.types import LogprobConvention, ModelRequest, TokenChunk

__all__ = ["TransformersEngine"]


class TransformersEngine(EngineBase):
    """An `InferenceEngine` running a local Hugging Face causal LM in this process.

    Concurrent requests decode as one batch; a request arriving mid-generation joins at the next
    step. The logprob recorded for each token is log_softmax(logits / T) of the sampled token (T=1
    for temperature 0), before top-k/top-p filtering: `LogprobConvention.TEMPERATURE_SCALED`.

    Usage:
        engine = TransformersEngine("/models/Qwen2.5-0.5B-Instruct", dtype="float32")
        await engine.start()
        response = await engine.generate(ModelRequest(input_ids=ids, max_new_tokens=64))
        async for chunk in engine.stream(ModelRequest(input_ids=ids, temperature=0.7, seed=1)):
            print(chunk.token_ids, chunk.logprobs, chunk.versions)
        await engine.update_weights(trainer_model.state_dict())  # version 0 -> 1
        await engine.close()

    `model` is a checkpoint folder or an already loaded model; `tokenizer` defaults to the model
    folder and is needed only for stop strings. `eos_token_ids` (default: from the generation
    config, model config and tokenizer; `[]` disables) always end a sequence, in addition to each
    request's `stop_token_ids`. `max_context` defaults to `max_position_embeddings`.

    Requests admitted in the same step are prefilled together: at most `prefill_batch_size`
    (default: `max_batch_size`) distinct prompts and `max_prefill_tokens` tokens, padding
    included, per forward; requests with the same prompt share one row. `prefill_batch_size=1`
    prefills each request alone (the slower path, kept as the reference the batched one is
    tested against).
    """

    logprob_convention: LogprobConvention = LogprobConvention.TEMPERATURE_SCALED
    takes_state_dict = True

    def __init__(
        self,
        model: ModelSource,
        *,
        tokenizer: TokenizerSource = None,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
        num_threads: int | None = 1,
        max_batch_size: int = 32,
        prefill_batch_size: int | None = None,
        max_prefill_tokens: int = MAX_PREFILL_TOKENS,
        max_context: int | None = None,
        eos_token_ids: Sequence[int] | None = None,
        attn_implementation: str | None = None,
        version: int = 0,
    ) -> None:
        prefill_rows = max_batch_size if prefill_batch_size is None else prefill_batch_size
        check_sizes(max_batch_size=max_batch_size, prefill_batch_size=prefill_rows,
                    max_prefill_tokens=max_prefill_tokens)  # fmt: skip
        super().__init__(version=version)
        self._host = ModelHost(
            model,
            tokenizer=tokenizer,
            device=device,
            dtype=dtype,
            num_threads=num_threads,
            attn_implementation=attn_implementation,
        )
        self._max_batch_size = max_batch_size
        self._prefill_rows = prefill_rows
        self._max_prefill_tokens = max_prefill_tokens
        self._max_context_override = max_context
        self._eos_override = None if eos_token_ids is None else list(eos_token_ids)
        self._slots: dict[str, Slot] = {}
        self._pending: deque[Slot] = deque()
        self._batch: KVBatch[Slot] = KVBatch(lambda: None, self._host.device)
        self._starting: asyncio.Task[None] | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._step_lock: asyncio.Lock | None = None
        self._cache_kwarg = "cache"
        self._context_limit = 0
        self._eos_ids: list[int] = []
        self._vocab_size = 0
        self._grammars = GrammarTokenizer(None, 0)
        self._masks = MaskWorker()
        self._router = AdapterRouter()

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def model(self) -> Any:
        """The loaded model (None before `start`)."""
        return self._host.model

    @property
    def eos_token_ids(self) -> list[int]:
        """The ids that end every sequence (besides each request's own `stop_token_ids`)."""
        return list(self._eos_ids)

    @property
    def tokenizer(self) -> Any:
        """The loaded tokenizer, or None when the model folder has none."""
        return self._host.tokenizer

    async def start(self) -> None:
        """Load the model on the worker thread and start the decode loop. Idempotent."""
        if self._loop_task is not None and not self._loop_task.done():
            return
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        try:
            await asyncio.shield(self._starting)
        finally:
            if self._starting is not None and self._starting.done():
                self._starting = None

    async def _start(self) -> None:
        await self._host.start()
        model = self._host.model
        from transformers import DynamicCache

        config = model.config
        self._cache_kwarg = cache_kwarg(model)
        check_cache_layout(DynamicCache(config=config))
        self._batch = KVBatch(lambda: DynamicCache(config=config), self._host.device)
        self._context_limit = context_limit(model, self._max_context_override)
        self._eos_ids = (
            default_eos_ids(model, self._host.tokenizer)
            if self._eos_override is None
            else self._eos_override
        )
        self._vocab_size = int(model.get_input_embeddings().weight.shape[0])
        self._grammars = GrammarTokenizer(self._host.tokenizer, self._vocab_size)
        self._wake = asyncio.Event()
        self._step_lock = asyncio.Lock()
        self._loop_task = asyncio.create_task(self._run(), name="rltap-transformers-decode-loop")

    async def close(self) -> None:
        """Stop the decode loop; requests in flight end with `StopReason.ABORT`."""
        if self._starting is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._starting)
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._host.close()  # waits for a step still running on the worker thread
        self._masks.close()
        for slot in list(self._slots.values()):
            self._finish(slot, abort_chunk())
        self._pending.clear()
        self._batch.reset()

    # -- requests ----------------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        """Yield tokens as the decode loop produces them; the last chunk has the stop reason.

        Closing the iterator (or cancelling its consumer) aborts the request and frees its row.
        """
        await self.start()
        if self._loop_task is None or self._loop_task.done():
            msg = "the engine was closed while this request waited for it to start"
            raise EngineUnavailable(msg)
        slot = self._new_slot(request)
        if request.constraint is not None:  # compiling may take a while: off the loop
            end_ids = sorted(slot.stops.stop_token_ids)
            slot.grammar = await asyncio.to_thread(
                self._grammars.matcher, request.constraint, end_ids
            )
        self._slots[request.request_id] = slot
        self._pending.append(slot)
        assert self._wake is not None
        self._wake.set()
        try:
            while True:
                items = await slot.mailbox.take_all()
                chunks = [item for item in items if isinstance(item, TokenChunk)]
                if chunks:
                    chunk = merge_chunks(chunks)
                    yield chunk
                    if chunk.stop_reason is not None:
                        return
                for item in items:
                    if isinstance(item, BaseException):
                        raise item
        finally:
            self._release(slot)

    def _new_slot(self, request: ModelRequest) -> Slot:
        if request.request_id in self._slots:
            msg = f"request {request.request_id} is already in flight"
            raise Conflict(msg)
        return new_slot(
            request,
            context_limit=self._context_limit,
            vocab_size=self._vocab_size,
            eos_ids=self._eos_ids,
            tokenizer=self._host.tokenizer,
            device=self._host.device,
        )

    async def abort(self, request_id: str) -> None:
        """Stop a request in flight: its stream ends with `StopReason.ABORT`."""
        slot = self._slots.get(request_id)
        if slot is not None:
            self._finish(slot, abort_chunk())

    def _finish(self, slot: Slot, final: TokenChunk | BaseException | None) -> None:
        """Mark `slot` done from the event loop; its row is dropped before the next step."""
        slot.finished = True
        if slot.closed:
            return
        slot.closed = True
        with contextlib.suppress(ValueError):
            self._pending.remove(slot)
        if final is not None:
            slot.mailbox.put(final)

    def _release(self, slot: Slot) -> None:
        self._finish(slot, None)  # the consumer is gone: nobody to tell
        if self._slots.get(slot.request.request_id) is slot:
            del self._slots[slot.request.request_id]

    # -- weights -----------------------------------------------------------------------------

    async def update_weights(
        self,
        source: WeightSource,
        *,
        version: int | None = None,
        partial: bool = False,
        recompute_cache: bool = True,
    ) -> int:
        """Copy `source`'s weights into the model between two decode steps, in place; return
        the new version (`version`, or the current one plus one).

        `source` is a state dict (a trainer in this process, or one Ray resolved from its
        object store), a `WeightFolder` of safetensors shards, or a LoRA adapter
        (`AdapterWeights`: injected into the model on the first update, then only its tensors
        are copied; see `rltap.engines.lora`). Every weight must be in it unless `partial`.
        An adapter named after a policy moves that policy's version only, and the requests
        whose `policy` names it generate with it (one forward mixes every policy's rows and
        the base model's: `rltap.engines._adapters`).
        Requests in flight keep going: tokens after the update carry the
        new version, and with `recompute_cache` their KV cache is rebuilt with the new weights
        (prompt and output so far are prefilled again), so one reply may hold tokens of two
        versions, each recorded as what produced it.
        """
        await self.start()
        assert self._step_lock is not None
        # Before the lock: reading shards holds up no step.
        load = await weight_loader(source, partial=partial)
        policy = source.name if isinstance(source, AdapterWeights) else None
        async with self._step_lock:
            await self._host.run(self._load, load, policy)
            new_version = self.next_version(version, policy=policy)
            self.set_policy_version(policy, new_version)
            if recompute_cache:
                self._recompute(policy)
        return new_version

    def _load(self, load: Callable[[Any], None], adapter: str | None) -> None:
        load(self._host.model)
        if adapter is not None:
            self._router.add(self._host.model, adapter)

    def _recompute(self, policy: str | None) -> None:
        """Prefill again the rows generating with what the update of `policy` changed."""
        rows = [s for s in self._batch.rows if not s.finished]
        rows = [s for s in rows if self._router.changes(policy, s.request.policy)]
        self._batch.keep(lambda slot: not slot.finished and slot not in rows)
        self._pending.extendleft(reversed(rows))

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """No decode step runs inside: a trainer updates the model this engine generates with."""
        await self.start()
        assert self._step_lock is not None
        async with self._step_lock:
            yield

    # -- the decode loop ---------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        assert self._step_lock is not None
        while True:
            if not self._pending and all(slot.finished for slot in self._batch.rows):
                self._wake.clear()
                await self._wake.wait()
                continue
            async with self._step_lock:
                room = self._max_batch_size - sum(not s.finished for s in self._batch.rows)
                admit = [self._pending.popleft() for _ in range(min(room, len(self._pending)))]
                try:
                    emissions = await self._host.run(self._iterate, admit)
                except Exception as exc:  # a failed step must not kill the loop
                    self._fail_step(admit, exc)
                    continue
            self._deliver(emissions)

    def _fail_step(self, admitted: Sequence[Slot], exc: Exception) -> None:
        error = exc if isinstance(exc, RltapError) else None
        if error is None:
            error = EngineError(f"decode step failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
        for slot in [*self._batch.rows, *admitted]:
            self._finish(slot, error)
        self._batch.reset()

    def _deliver(self, emissions: Sequence[Emission]) -> None:
        for e in emissions:
            if e.slot.closed:
                continue  # aborted while the step ran: the token was never handed out
            if e.slot.error is not None:
                self._finish(e.slot, e.slot.error)
                continue
            e.slot.mailbox.put(e.chunk())
            if e.stop_reason is not None:
                e.slot.closed = True

    # -- on the worker thread ----------------------------------------------------------------

    def _iterate(self, admit: Sequence[Slot]) -> list[Emission]:
        batch = self._batch
        batch.keep(lambda slot: not slot.finished)
        self._admit([slot for slot in admit if not slot.finished])
        if not batch.rows:
            return []
        masking = self._masks.submit([s.grammar for s in batch.rows], self._vocab_size)
        with self._router.route(self._router.rows_for([s.request.policy for s in batch.rows])):
            out = self._host.model(**batch.step_inputs(self._cache_kwarg))
        masks = masking.result() if masking is not None else None
        samplers = [s.sampler for s in batch.rows]
        tokens, logprobs = sample_rows(out.logits[:, -1, :], samplers, masks)
        batch.advance(tokens)
        emissions = []
        for slot, token, logprob in zip(batch.rows, tokens, logprobs, strict=True):
            reason = slot.record(token)
            if reason is not None:
                slot.finished = True
            version = self.policy_version(slot.request.policy)
            emissions.append(Emission(slot, token, logprob, version, reason))
        batch.keep(lambda slot: not slot.finished)
        return emissions

    def _admit(self, slots: Sequence[Slot]) -> None:
        admit(self._batch, self._host.model, slots, self._cache_kwarg, self._prefill_rows,
              self._max_prefill_tokens, self._router)  # fmt: skip
