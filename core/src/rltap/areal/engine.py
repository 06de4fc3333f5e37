"""An AReaL engine as one of rltap's: `agenerate(ModelRequest) -> ModelResponse` behind rltap's
`InferenceEngine` protocol, so the proxy, the direct client and `ArealOpenAI` run on it.

Usage:
    engine = ArealEngine(RemoteSGLangEngine(config), tokenizer=tokenizer)
    client = DirectOpenAI(engine=engine, tokenizer=tokenizer)   # or behind `create_app`

What an AReaL engine lacks is refused, never dropped: a grammar (structured outputs, a forced
tool call) or a `seed` is a 400 naming it. The engine answers in one piece, so a streamed reply
arrives as one chunk; closing the stream cancels the `agenerate` call.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from rltap.areal.io_struct import request_classes, to_rltap_response
from rltap.engines.base import EngineBase, InferenceEngine
from rltap.record.errors import EngineError, InvalidRequest, RltapError
from rltap.record.types import LogprobConvention, ModelRequest, ModelResponse, TokenChunk

__all__ = ["ArealEngine", "as_rltap_engine"]

# AReaL's GenerationHyperparameters has no "top-k off"; this is its default, which means that.
_NO_TOP_K = int(1e8)


class ArealEngine(EngineBase):
    """Generates with an AReaL engine; policy versions are the engine's own (`get_version`).

    `tokenizer` is set on each request, as AReaL's client does (its engines decode stop
    strings with it). `logprob_convention` says which distribution the engine's server returns
    logprobs from (vLLM's default: raw). `lora_name` is AReaL's per-request adapter name.
    """

    def __init__(
        self,
        engine: Any,
        *,
        tokenizer: Any = None,
        logprob_convention: LogprobConvention = LogprobConvention.RAW,
        lora_name: str = "",
    ) -> None:
        needed = ("agenerate", "get_version")
        missing = [name for name in needed if not callable(getattr(engine, name, None))]
        if missing:
            msg = f"{type(engine).__name__} is not an AReaL engine: it has no {', '.join(missing)}"
            raise TypeError(msg)
        super().__init__()
        self.engine = engine
        self.tokenizer = tokenizer
        self.logprob_convention = logprob_convention
        self.lora_name = lora_name
        self._running: dict[str, asyncio.Task[Any]] = {}

    @property
    def version(self) -> int:
        return int(self.engine.get_version())

    def set_version(self, version: int) -> None:
        set_version = getattr(self.engine, "set_version", None)
        if not callable(set_version):
            msg = f"{type(self.engine).__name__} has no set_version(version)"
            raise TypeError(msg)
        set_version(version)

    def areal_request(self, request: ModelRequest) -> Any:
        """rltap's request as the AReaL `ModelRequest` the engine takes."""
        if request.constraint is not None:
            msg = f"the AReaL engine cannot decode under a grammar ({request.constraint.reason})"
            raise InvalidRequest(msg, param="response_format")
        if request.seed is not None:
            msg = "the AReaL engine takes no seed; leave `seed` unset"
            raise InvalidRequest(msg, param="seed")
        request_class, config_class = request_classes()
        gconfig = config_class(
            max_new_tokens=request.max_new_tokens,
            # rltap checked the context already; AReaL's own cap must not cut the reply again.
            max_tokens=len(request.input_ids) + request.max_new_tokens,
            greedy=request.greedy,
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k or _NO_TOP_K,
            stop_token_ids=list(request.stop_token_ids),
            stop=list(request.stop) or None,
            lora_name=self.lora_name,
        )
        return request_class(
            rid=request.request_id,
            input_ids=list(request.input_ids),
            gconfig=gconfig,
            tokenizer=self.tokenizer,
        )

    async def generate(self, request: ModelRequest) -> ModelResponse:
        areal_request = self.areal_request(request)
        task = asyncio.ensure_future(self.engine.agenerate(areal_request))
        self._running[request.request_id] = task
        try:
            response = await task
        except RltapError:
            raise
        except Exception as exc:  # the engine's own error types: one rltap error, the cause kept
            msg = f"the AReaL engine failed: {type(exc).__name__}: {exc}"
            raise EngineError(msg) from exc
        finally:
            self._running.pop(request.request_id, None)
        try:
            return to_rltap_response(response, self.logprob_convention)
        except ValueError as exc:
            msg = f"the AReaL engine returned an unusable response: {exc}"
            raise EngineError(msg) from exc

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        response = await self.generate(request)
        yield TokenChunk(
            token_ids=response.output_tokens,
            logprobs=response.output_logprobs,
            versions=response.output_versions,
            stop_reason=response.stop_reason,
        )

    async def abort(self, request_id: str) -> None:
        task = self._running.get(request_id)
        if task is not None:
            task.cancel()

    async def start(self) -> None:
        """AReaL's trainer initialises its engines itself."""

    async def close(self) -> None:
        for task in list(self._running.values()):
            task.cancel()


def as_rltap_engine(engine: Any, *, tokenizer: Any = None, lora_name: str = "") -> InferenceEngine:
    """`engine` itself when it is rltap's, else `ArealEngine(engine)`."""
    if isinstance(engine, InferenceEngine):
        if lora_name:
            msg = "lora_name needs an AReaL engine; rltap's engines serve no LoRA adapters"
            raise ValueError(msg)
        return engine
    return ArealEngine(engine, tokenizer=tokenizer, lora_name=lora_name)
