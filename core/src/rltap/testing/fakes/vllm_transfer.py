"""A fake vLLM server with vLLM's weight-transfer API, and a transport that feeds it in process.

`FakeTransferVLLM` serves the instant completions of `rltap.testing.fakes.vllm` plus the routes
a vLLM server started with `VLLM_SERVER_DEV_MODE=1` and `--weight-transfer-config` has:
`/init_weight_transfer_engine`, `/start_weight_update`, `/update_weights`,
`/finish_weight_update`, `/shutdown_weight_transfer_engine`, `GET /get_world_size`, `/pause`
(`mode=wait` waits for the completions in flight; completions that arrive while paused are held
until `/resume`), `/resume`, `GET /is_paused`, `/reset_prefix_cache`. Its workers' bookkeeping is
vLLM 0.32's: an update needs a start before it and none already active; a failed update ends
the active one, a failed finish does not (vLLM's workers then refuse the next start).

`transport()` gives the `rltap.engines.vllm_transfer.WeightTransport` tests run the engine
with (`VLLMEngine(url, transfer=VLLMWeightTransfer("ipc", transport=server.transport()))`,
or `transfer()` for short): as vLLM's NCCL
transfer does, the names, dtypes and shapes of a chunk travel in `/update_weights` and the data
beside it, here a copy of each tensor handed to the fake in this process, which checks them
against the names, dtypes and shapes and keeps them. Chunks hold at most `chunk_bytes` (a larger
tensor is a chunk of its own). The weights of a finished update are `weights`, labelled
`weight_version`.

`calls` lists every request, as {"phase": route without "/", "body", "query"}, and each
completion as {"phase": "completion", "weight_version": the label of the weights it ran on}.
`fail[phase] = n` makes the next n requests of that phase fail (500, as vLLM answers an error
in its workers), after they did what vLLM's workers do on that failure.

Usage:
    async with FakeTransferVLLM() as server:
        engine = VLLMEngine(server.url, transfer=server.transfer())
        await engine.update_weights(named_tensors(model), version=1)
        assert server.weight_version == "1"
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from rltap.engines.vllm_transfer import TransferPhases, VLLMWeightTransfer, chunked
from rltap.testing.fakes._serving import ServedApp
from rltap.testing.fakes.vllm import make_app

if TYPE_CHECKING:
    import torch

    from rltap.engines.base import NamedTensors

__all__ = ["FakeTransferVLLM", "LoopbackTransport"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BODY = web.RequestKey("body", dict)
FAILING = web.RequestKey("failing", bool)


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


@dataclass
class _Workers:
    """vLLM's workers' side of a transfer: what they hold and what they received."""

    initialized: bool = False
    active: bool = False
    staged: dict[str, torch.Tensor] = field(default_factory=dict)
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    label: str | None = None


class FakeTransferVLLM(ServedApp):
    """The fake (module docstring), served in this process on a free 127.0.0.1 port.

    `latency` delays each completion that long before it answers (a request in flight);
    `world_size` is what `GET /get_world_size` answers.
    """

    def __init__(self, *, latency: float = 0.0, world_size: int = 1) -> None:
        self.latency = latency
        self.world_size = world_size
        self.calls: list[dict[str, Any]] = []
        self.fail: dict[str, int] = {}
        self.chunks: list[list[str]] = []  # the names of each /update_weights, in order
        self.paused = False
        self._workers = _Workers()
        self._wire: deque[list[tuple[str, torch.Tensor]]] = deque()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._resumed = asyncio.Event()
        self._pausing = asyncio.Event()

    @property
    def weights(self) -> dict[str, torch.Tensor]:
        """The weights of the last finished update, by name."""
        return dict(self._workers.weights)

    @property
    def weight_version(self) -> str | None:
        """vLLM's label of its weights (`finish_weight_update`'s `weight_version`)."""
        return self._workers.label

    async def wait_paused(self) -> None:
        """Return once a `/pause` arrived (and is waiting for the requests in flight)."""
        await self._pausing.wait()

    def phases(self) -> list[str]:
        """The phases called so far, in order (completions left out)."""
        return [call["phase"] for call in self.calls if call["phase"] != "completion"]

    def transport(self, chunk_bytes: int = 4096) -> LoopbackTransport:
        """A transport that hands this fake each chunk's tensors in process."""
        return LoopbackTransport(self, chunk_bytes)

    def transfer(self, chunk_bytes: int = 4096, backend: str = "nccl") -> VLLMWeightTransfer:
        """A `VLLMEngine`'s `transfer` that runs `backend`'s phases through `transport()`."""
        return VLLMWeightTransfer(backend, transport=self.transport(chunk_bytes))

    def app(self) -> web.Application:
        self._idle.set()
        self._resumed.set()
        app = make_app()
        app.middlewares.append(self._hold_while_paused)
        routes: dict[str, Handler] = {
            "pause": self._pause,
            "resume": self._resume,
            "reset_prefix_cache": self._simple({"success": True}),
            "init_weight_transfer_engine": self._init,
            "shutdown_weight_transfer_engine": self._simple({"message": "shut down"}),
            "start_weight_update": self._start,
            "update_weights": self._update,
            "finish_weight_update": self._finish,
        }
        for phase, handler in routes.items():
            app.router.add_post(f"/{phase}", self._phase(phase, handler))
        app.router.add_get("/is_paused", self._simple_get(lambda: {"is_paused": self.paused}))
        app.router.add_get(
            "/get_world_size", self._simple_get(lambda: {"world_size": self.world_size})
        )
        return app

    def _phase(self, phase: str, handler: Handler) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            raw = await request.read()
            body = orjson.loads(raw) if raw.strip() else None
            self.calls.append({"phase": phase, "body": body, "query": dict(request.query)})
            request[BODY] = body if isinstance(body, dict) else {}
            failing = self.fail.get(phase, 0) > 0
            if failing:
                self.fail[phase] -= 1
                request[FAILING] = True
            try:
                response = await handler(request)
            except ValueError as exc:
                return _json({"error": str(exc)}, 500)
            if failing:
                return _json({"error": f"the fake failed {phase} on purpose"}, 500)
            return response

        return handle

    @web.middleware
    async def _hold_while_paused(
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        if request.path != "/v1/completions":
            return await handler(request)
        while self.paused:  # held until /resume, as vLLM holds requests that come while paused
            await self._resumed.wait()
        self._inflight += 1
        self._idle.clear()
        try:
            self.calls.append({"phase": "completion", "weight_version": self._workers.label})
            await asyncio.sleep(self.latency)
            return await handler(request)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    def _simple(self, reply: dict[str, Any]) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            return _json(reply)

        return handle

    def _simple_get(self, reply: Callable[[], dict[str, Any]]) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            self.calls.append({"phase": request.path[1:], "body": None, "query": {}})
            return _json(reply())

        return handle

    async def _pause(self, request: web.Request) -> web.Response:
        if request.get(FAILING):
            return _json({})
        self.paused = True
        self._pausing.set()
        self._resumed.clear()
        if request.query.get("mode", "abort") == "wait":
            await self._idle.wait()
        return _json({"status": "paused"})

    async def _resume(self, request: web.Request) -> web.Response:
        if not request.get(FAILING):
            self.paused = False
            self._resumed.set()
        return _json({"status": "resumed"})

    async def _init(self, request: web.Request) -> web.Response:
        if not request.get(FAILING):
            self._workers.initialized = True
        return _json({"message": "Weight transfer initialized"})

    async def _start(self, request: web.Request) -> web.Response:
        workers = self._workers
        if workers.active:
            msg = "start_weight_update called while a weight update is already active"
            raise ValueError(msg)
        if not request.get(FAILING):
            workers.active = True
            workers.staged = {}
        return _json({"message": "Weight update started"})

    async def _update(self, request: web.Request) -> web.Response:
        workers = self._workers
        if not workers.active:
            raise ValueError("start_weight_update must be called before update_weights")
        if not workers.initialized:
            raise ValueError("the weight transfer is not initialized")
        info: dict[str, Any] = request[BODY]["update_info"]
        names = list(info["names"])
        self.chunks.append(names)
        try:
            received = self._wire.popleft() if self._wire else []
            _check_chunk(info, received)
            if request.get(FAILING):
                raise ValueError("failing on purpose")
        except ValueError:
            workers.active = False  # vLLM's worker ends the update it could not load
            raise
        workers.staged.update(received)
        return _json({"message": "Weights updated"})

    async def _finish(self, request: web.Request) -> web.Response:
        workers = self._workers
        if not workers.active:
            raise ValueError("finish_weight_update called without a matching start")
        if request.get(FAILING):
            return _json({})  # vLLM's workers stay inside the update when finishing fails
        workers.weights.update(workers.staged)
        workers.active = False
        body: dict[str, Any] = request[BODY]
        if body.get("weight_version") is not None:
            workers.label = str(body["weight_version"])
        return _json({"message": "Weight update finished"})


def _check_chunk(info: dict[str, Any], received: list[tuple[str, torch.Tensor]]) -> None:
    """The tensors beside an `/update_weights` must be the ones it names, as described."""
    described = list(zip(info["names"], info["dtype_names"], info["shapes"], strict=True))
    got = [(name, str(t.dtype).removeprefix("torch."), list(t.shape)) for name, t in received]
    if got != described:
        msg = f"update_weights described {described[:3]}... but the tensors were {got[:3]}..."
        raise ValueError(msg)


class LoopbackTransport:
    """A `WeightTransport` into a `FakeTransferVLLM` of this process (module docstring)."""

    def __init__(self, server: FakeTransferVLLM, chunk_bytes: int) -> None:
        self.server = server
        self.chunk_bytes = chunk_bytes
        self.closed = 0  # how often the engine dropped the connection
        self._phases: TransferPhases | None = None

    def connect(self, phases: TransferPhases, source: NamedTensors) -> None:
        phases.init_weight_transfer_engine({"backend": "loopback"})
        self._phases = phases

    def send(self, source: NamedTensors) -> None:
        phases = self._phases
        if phases is None:
            raise RuntimeError("send before connect")
        phases.start_weight_update()
        for chunk in chunked(source.tensors(), self.chunk_bytes):
            copies = [(name, tensor.detach().to("cpu", copy=True)) for name, tensor in chunk]
            self.server._wire.append(copies)
            phases.update_weights(
                {
                    "names": [name for name, _ in copies],
                    "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in copies],
                    "shapes": [list(t.shape) for _, t in copies],
                }
            )
        phases.finish_weight_update()

    def close(self) -> None:
        self.closed += 1
