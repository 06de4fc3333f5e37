"""What the HTTP engines (vLLM, SGLang) share: the client, the requests in flight, one streaming
loop and one aborted response.

`HTTPEngineBase.stream` is a template method: it posts the engine's streamed request, reads the
server-sent events and handles aborts and a stream that ends without a finish reason; each
engine supplies the request body (`request_body`) and how one event becomes a chunk
(`event_reader`). Client and server failures arrive as `EngineError`s from `EngineHTTPClient`.

`update_weights` is one too: the server loads a `WeightFolder` it can read (same machine or a
shared disk). It checks the server can (`check_weight_reload`), has the folder written, then
has the server load it (`reload_weights`), on a client of its own: a connection limit on the
engine never holds a weight update up behind generations that a paused server does not answer.
A LoRA adapter folder (`WeightFolder(adapter=True)`) goes to `load_adapter` instead, for an
engine whose server serves adapters (`serves_adapters`), and `NamedTensors` to
`transfer_weights`, for one whose server receives tensors (`takes_named_tensors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import abstractmethod
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import aiohttp

from rltap.engines._http_client import EngineHTTPClient, iter_sse_data
from rltap.engines.base import EngineBase, NamedTensors, WeightFolder, WeightSource
from rltap.record.errors import EngineError, InvalidRequest
from rltap.record.types import (
    LogprobConvention,
    ModelRequest,
    ModelResponse,
    StopReason,
    TokenChunk,
)

__all__ = ["EventReader", "HTTPEngineBase", "InflightRequests"]

# One server-sent event's payload -> the chunk it carries (None: nothing new in it).
EventReader = Callable[[bytes], TokenChunk | None]


@dataclass(slots=True)
class _Inflight:
    aborted: bool = False
    response: aiohttp.ClientResponse | None = None
    task: asyncio.Task[Any] | None = None


@dataclass(slots=True)
class InflightRequests:
    """Requests in flight by id, so `abort(request_id)` can reach the one that runs it.

    A plain request is aborted by cancelling the task awaiting it (it awaits nothing but the
    engine); a stream by closing its response, which the engine sees as a disconnect.
    """

    _requests: dict[str, _Inflight] = field(default_factory=dict)

    @contextlib.contextmanager
    def track(self, request_id: str, *, cancel_task: bool) -> Iterator[_Inflight]:
        entry = self.add(request_id, cancel_task=cancel_task)
        try:
            yield entry
        finally:
            self.remove(request_id)

    def add(self, request_id: str, *, cancel_task: bool) -> _Inflight:
        """Register `request_id` (`track` without the context manager; `remove` it after)."""
        if request_id in self._requests:
            msg = f"request id {request_id!r} is already in flight"
            raise EngineError(msg)
        entry = _Inflight(task=asyncio.current_task() if cancel_task else None)
        self._requests[request_id] = entry
        return entry

    def remove(self, request_id: str) -> None:
        del self._requests[request_id]

    def abort(self, request_id: str) -> bool:
        """Abort `request_id`; False when no such request is in flight."""
        entry = self._requests.get(request_id)
        if entry is None or entry.aborted:
            return False
        entry.aborted = True
        if entry.response is not None:
            entry.response.close()
        elif entry.task is not None:
            entry.task.cancel()
        return True

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._requests

    def __len__(self) -> int:
        return len(self._requests)


def _abort_chunk() -> TokenChunk:
    return TokenChunk(token_ids=[], logprobs=[], versions=[], stop_reason=StopReason.ABORT)


class HTTPEngineBase(EngineBase):
    """What every engine behind an HTTP server shares: its client, the requests in flight, the
    streaming loop, and the policy-version counter (the server does not know rltap's versions;
    tokens are stamped here)."""

    engine_name: ClassVar[str] = "engine"
    request_path: ClassVar[str]  # the route that generates, streamed or not
    takes_state_dict = False
    # Whether `update_weights` takes a LoRA adapter folder (`WeightFolder(adapter=True)`).
    serves_adapters: ClassVar[bool] = False
    # Whether `update_weights` takes `NamedTensors` (`transfer_weights`), not only folders.
    takes_named_tensors: bool = False

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None,
        timeout: float | None,
        connect_timeout: float,
        version: int,
        logprob_convention: LogprobConvention,
        max_connections: int,
    ) -> None:
        super().__init__(version=version)
        self._client = EngineHTTPClient(
            url,
            engine=self.engine_name,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_connections=max_connections,
        )
        self.logprob_convention = logprob_convention
        self._inflight = InflightRequests()

    @property
    def url(self) -> str:
        return self._client.base_url

    @abstractmethod
    def request_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The JSON body that generates `request` token for token."""

    @abstractmethod
    def event_reader(self, request: ModelRequest) -> EventReader:
        """How each event of `request`'s stream becomes a chunk (a new reader per stream)."""

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        """Stream `request`: one chunk per server event; the last carries the stop reason."""
        await self.start()
        body = self.request_body(request, stream=True)
        read_event = self.event_reader(request)
        with self._inflight.track(request.request_id, cancel_task=False) as entry:
            try:
                async with self._client.post(self.request_path, body) as response:
                    entry.response = response
                    if entry.aborted:  # abort() came before the response headers
                        response.close()
                    async for payload in iter_sse_data(response):
                        chunk = read_event(payload)
                        if chunk is None:
                            continue
                        yield chunk
                        if chunk.stop_reason is not None:
                            return
            except EngineError:
                if not entry.aborted:
                    raise
            if not entry.aborted:
                msg = f"{self.engine_name} ended the stream without a finish reason"
                raise EngineError(msg, is_retryable=True)
        yield _abort_chunk()

    def aborted_response(self, request: ModelRequest, started: float) -> ModelResponse:
        """The response of a request aborted before the server answered: nothing produced."""
        return ModelResponse(
            input_tokens=list(request.input_ids),
            stop_reason=StopReason.ABORT,
            logprob_convention=self.logprob_convention,
            constrained=request.constraint is not None,
            latency=time.perf_counter() - started,
        )

    async def update_weights(self, source: WeightSource, *, version: int | None = None) -> int:
        """Have the server load the weights in `source` (a `WeightFolder` it can read, saved
        by `source.save` once the server is known to take them, or `NamedTensors` for an
        engine that `takes_named_tensors`); return the new version."""
        taken = self._taken(source)
        client = self._client.detached()
        try:
            if isinstance(taken, NamedTensors):
                await self.transfer_weights(client, taken, self.next_version(version))
            elif taken.adapter:
                await self.load_adapter(client, await taken.written(), self.next_version(version))
            else:
                await self.check_weight_reload(client)
                folder = await taken.written()
                await self.reload_weights(client, folder, self.next_version(version))
        finally:
            await client.close()
        return self._version

    def _taken(self, source: WeightSource) -> WeightFolder | NamedTensors:
        """`source` if this engine takes it, else `InvalidRequest` saying what it takes."""
        if isinstance(source, NamedTensors) and self.takes_named_tensors:
            return source
        if not isinstance(source, WeightFolder):
            msg = (
                f"{self.engine_name} loads new weights from a folder its server reads: pass a "
                f"WeightFolder (rltap.engines.base), not {type(source).__name__}"
            )
            raise InvalidRequest(msg)
        if source.adapter and not self.serves_adapters:
            msg = (
                f"the {self.engine_name} engine serves no LoRA adapter: train every weight "
                "(--lora-rank 0), or serve with the transformers or vllm engine"
            )
            raise InvalidRequest(msg)
        return source

    async def transfer_weights(
        self, client: EngineHTTPClient, source: NamedTensors, version: int
    ) -> None:
        """Have the server receive `source`'s tensors from this process; move the engine's
        version to `version` once the requests it serves next generate with them (an engine
        that `takes_named_tensors`)."""
        msg = f"the {self.engine_name} engine takes no NamedTensors"
        raise InvalidRequest(msg)

    @abstractmethod
    async def check_weight_reload(self, client: EngineHTTPClient) -> None:
        """Fail before the save (which takes a while for a large model) if the server lacks
        what `reload_weights` needs."""

    @abstractmethod
    async def reload_weights(self, client: EngineHTTPClient, folder: Path, version: int) -> None:
        """Have the server load the shards in `folder`; move the engine's version to `version`
        once the requests it will serve next generate with them."""

    async def load_adapter(self, client: EngineHTTPClient, folder: Path, version: int) -> None:
        """Have the server serve the base model with the peft LoRA adapter in `folder` from now
        on; move the engine's version to `version` (an engine with `serves_adapters`)."""
        msg = f"the {self.engine_name} engine serves no LoRA adapter"
        raise InvalidRequest(msg)

    async def close(self) -> None:
        """Close the HTTP session. Requests in flight fail; the engine can be started again."""
        await self._client.close()
