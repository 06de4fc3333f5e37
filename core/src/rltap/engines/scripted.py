"""A fake engine that replies with scripted text as real tokens with real logprobs.

The script decides each reply from the conversation; the engine tokenizes it with the model's
real tokenizer, appends the end-of-turn token and scores every output token by teacher forcing a
real (typically tiny) model over prompt + output, so everything downstream (parsing, recording,
export, training) sees what a real engine would produce. It is the offline stand-in users test
their agents with, and the engine behind rltap's own end-to-end tests.

Under a `Constraint` (structured outputs, a forced tool call) the script still decides the reply,
and the engine checks it token by token with the same llguidance matcher the embedded engine
samples under: a reply the grammar refuses fails the request with an `EngineError` that names
the constraint and where the reply left it, so a test never passes off a reply a constrained
real engine could not produce. JSON under a grammar is compact (`{"a":1}`, as
`json.dumps(obj, separators=(",", ":"))` writes it).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from rltap.engines._grammar import GrammarTokenizer
from rltap.engines._hf import (
    ModelHost,
    ModelSource,
    TokenizerSource,
    context_limit,
    teacher_forced_logprobs,
    weight_loader,
)
from rltap.engines._sampling import StopCriteria
from rltap.engines.base import EngineBase, WeightSource
from rltap.record.errors import ContextLengthExceeded, EngineError
from rltap.record.types import LogprobConvention, ModelRequest, StopReason, TokenChunk

__all__ = ["Script", "ScriptedEngine", "load_script"]

# script(messages, tools, turn) -> reply text (or an awaitable of it); `turn` counts the
# assistant messages already in the conversation (0 for the first reply).
Script = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None, int], str | Awaitable[str]]
Failure = EngineError | type[EngineError]


def load_script(spec: str) -> Script:
    """Import a script from `"package.module:function"` or `"path/to/file.py:function"`."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        msg = f"script must look like 'module:function' or 'file.py:function', got {spec!r}"
        raise ValueError(msg)
    if target.endswith(".py"):
        path = Path(target)
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            msg = f"cannot import {path}"
            raise ImportError(msg)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    script = getattr(module, name, None)
    if not callable(script):
        msg = f"{spec!r}: {name} is not a callable in {target}"
        raise ValueError(msg)
    return script  # type: ignore[no-any-return]


class ScriptedEngine(EngineBase):
    """An `InferenceEngine` that answers with `script(messages, tools, turn)`.

    Usage:
        def user_sim(messages, tools, turn):
            if turn == 0:
                return '<tool_call>\\n{"name": "search", "arguments": {}}\\n</tool_call>'
            return "The answer is 42."

        engine = ScriptedEngine(user_sim, model=cached_tiny_model_dir())
        response = await engine.generate(ModelRequest(input_ids=ids, messages=messages))
        # response.output_tokens: the tokenizer's ids of the reply + <|im_end|>
        # response.output_logprobs: teacher-forced log_softmax(logits) of the tiny model (RAW)

    `script` may be sync or async, or a `"module:function"` string (see `load_script`).
    The reply streams as a real engine's does, one chunk per token; `token_delay` sleeps before
    each one (for tests of what a client sees while a reply is still coming).
    `failures` maps a turn to the error raised on it (an `EngineError` instance or class, e.g.
    `{1: EngineTimeout}`), after `fail_after_tokens` tokens have been streamed.
    `end_token` defaults to `<|im_end|>` when the tokenizer has it, else its eos token.
    """

    logprob_convention: LogprobConvention = LogprobConvention.RAW
    takes_state_dict = True

    def __init__(
        self,
        script: Script | str,
        model: ModelSource,
        *,
        tokenizer: TokenizerSource = None,
        end_token: str | None = None,
        token_delay: float = 0.0,
        failures: Mapping[int, Failure] | None = None,
        fail_after_tokens: int = 0,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
        num_threads: int | None = 1,
        version: int = 0,
    ) -> None:
        super().__init__(version=version)
        self._script = load_script(script) if isinstance(script, str) else script
        self._host = ModelHost(
            model,
            tokenizer=tokenizer,
            tokenizer_required=True,
            device=device,
            dtype=dtype,
            num_threads=num_threads,
        )
        self._end_token = end_token
        self._end_id = -1
        self._context_limit = 0
        self._token_delay = token_delay
        self._failures = dict(failures or {})
        self._fail_after_tokens = fail_after_tokens
        self._aborted: dict[str, asyncio.Event] = {}
        self._grammars = GrammarTokenizer(None, 0)

    @property
    def tokenizer(self) -> Any:
        """The loaded tokenizer (None before `start`)."""
        return self._host.tokenizer

    async def start(self) -> None:
        """Load the scoring model and tokenizer. Idempotent."""
        if self._host.started:
            return
        await self._host.start()
        tokenizer = self._host.tokenizer
        name = self._end_token
        if name is None:
            has_im_end = "<|im_end|>" in tokenizer.get_vocab()
            name = "<|im_end|>" if has_im_end else tokenizer.eos_token
        end_id = tokenizer.convert_tokens_to_ids(name) if name is not None else None
        if not isinstance(end_id, int) or end_id < 0 or end_id == tokenizer.unk_token_id:
            msg = f"end token {name!r} is not in the tokenizer's vocabulary"
            raise EngineError(msg)
        self._end_id = end_id
        self._context_limit = context_limit(self._host.model, None)
        vocab_size = int(self._host.model.get_input_embeddings().weight.shape[0])
        self._grammars = GrammarTokenizer(tokenizer, vocab_size)

    async def close(self) -> None:
        """Abort every stream in flight and stop the worker thread."""
        for event in self._aborted.values():
            event.set()
        await self._host.close()

    async def abort(self, request_id: str) -> None:
        """Stop a request in flight: its stream ends with `StopReason.ABORT`."""
        event = self._aborted.get(request_id)
        if event is not None:
            event.set()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        """Yield the scripted reply's tokens, one chunk per token."""
        await self.start()
        if len(request.input_ids) >= self._context_limit:
            msg = f"prompt has {len(request.input_ids)} tokens; the limit is {self._context_limit}"
            raise ContextLengthExceeded(msg, param="messages")
        aborted = self._aborted.setdefault(request.request_id, asyncio.Event())
        try:
            messages = list(request.messages or [])
            turn = sum(1 for m in messages if m.get("role") == "assistant")
            output, reason = self._cut(request, await self._reply_ids(request, messages, turn))
            if request.constraint is not None:
                await asyncio.to_thread(self._check_constraint, request, output, turn)
            logprobs, version = await self._host.run(self._score, request.input_ids, output)
            failure = self._failures.get(turn)
            chunks = self._chunks(output, logprobs, version, reason, failure, turn)
            async for chunk in chunks:
                if aborted.is_set():
                    yield TokenChunk(
                        token_ids=[], logprobs=[], versions=[], stop_reason=StopReason.ABORT
                    )
                    return
                yield chunk
        finally:
            if self._aborted.get(request.request_id) is aborted:
                del self._aborted[request.request_id]

    async def _reply_ids(
        self, request: ModelRequest, messages: list[dict[str, Any]], turn: int
    ) -> list[int]:
        try:
            reply = self._script(messages, request.tools, turn)
            text = await reply if inspect.isawaitable(reply) else reply
        except EngineError:
            raise
        except Exception as exc:
            msg = f"script failed on turn {turn}: {type(exc).__name__}: {exc}"
            raise EngineError(msg) from exc
        if not isinstance(text, str):
            msg = f"script returned {type(text).__name__} on turn {turn}, expected str"
            raise EngineError(msg)
        ids: list[int] = self._host.tokenizer.encode(text, add_special_tokens=False)
        return [*ids, self._end_id]

    def _check_constraint(self, request: ModelRequest, output: list[int], turn: int) -> None:
        assert request.constraint is not None
        end_ids = [self._end_id, *request.stop_token_ids]
        grammar = self._grammars.matcher(request.constraint, end_ids)
        taken, why = grammar.accepts_reply(output)
        if taken == len(output):
            return
        decode = self._host.tokenizer.decode
        msg = (
            f"the scripted reply on turn {turn} does not match {request.constraint.reason}: "
            f"after {decode(output[:taken])!r} the grammar refuses "
            f"{decode(output[taken : taken + 8])!r} ({why})"
        )
        raise EngineError(msg)

    def _cut(self, request: ModelRequest, ids: list[int]) -> tuple[list[int], StopReason]:
        """Apply the request's stop ids, stop strings, max_new_tokens and the context limit."""
        stops = StopCriteria(
            prompt_len=len(request.input_ids),
            max_new_tokens=request.max_new_tokens,
            context_limit=self._context_limit,
            stop_token_ids=[self._end_id, *request.stop_token_ids],
            stop_strings=request.stop,
            tokenizer=self._host.tokenizer,
        )
        for n in range(1, len(ids) + 1):
            reason = stops.check(ids[:n])
            if reason is not None:
                return ids[:n], reason
        return ids, StopReason.STOP  # unreachable: the end token always stops

    def _score(self, input_ids: list[int], output: list[int]) -> tuple[list[float], int]:
        """On the worker thread: the output's logprobs and the version of the weights that
        scored them (an update swaps both on this thread, between two scorings)."""
        logprobs = teacher_forced_logprobs(self._host.model, input_ids, output)
        return logprobs, self._version

    async def update_weights(
        self, source: WeightSource, *, version: int | None = None, partial: bool = False
    ) -> int:
        """Copy `source`'s weights (a state dict, a `WeightFolder` of safetensors shards or a
        LoRA adapter, as `TransformersEngine.update_weights` takes them) into the scoring
        model in place; replies scored from then on carry the new version (`version`, or the
        current one plus one), which is returned. Every weight must be in `source` unless
        `partial`."""
        await self.start()
        loader = await weight_loader(source, partial=partial)
        new_version = self.next_version(version)

        def load() -> None:
            loader(self._host.model)
            self._version = new_version

        await self._host.run(load)
        return self._version

    async def _chunks(
        self,
        output: list[int],
        logprobs: list[float],
        version: int,
        reason: StopReason,
        failure: Failure | None,
        turn: int,
    ) -> AsyncGenerator[TokenChunk, None]:
        # A failure always comes before the final chunk: a stream that ended cleanly never fails.
        fail_at = min(self._fail_after_tokens, len(output) - 1)
        for index, (token_id, logprob) in enumerate(zip(output, logprobs, strict=True)):
            if failure is not None and index == fail_at:
                raise _instantiate(failure, turn)
            if self._token_delay > 0:
                await asyncio.sleep(self._token_delay)
            yield TokenChunk(
                token_ids=[token_id],
                logprobs=[logprob],
                versions=[version],
                stop_reason=reason if index == len(output) - 1 else None,
            )


def _instantiate(failure: Failure, turn: int) -> EngineError:
    if isinstance(failure, EngineError):
        return failure
    return failure(f"injected failure on turn {turn}")
