"""vLLM's own weight transfer: the trainer's tensors go straight into the server's workers.

A vLLM server started with `--weight-transfer-config '{"backend": "nccl"}'` (or `"ipc"`) and
`VLLM_SERVER_DEV_MODE=1` (which mounts the routes below, vLLM >= 0.32) receives new weights
from the trainer's memory: NCCL broadcasts from the trainer's GPU to the server's GPUs, CUDA
IPC hands a colocated server (same GPU) handles to the trainer's own buffers; nothing is
written to disk. `VLLMEngine(weight_transfer="nccl" | "ipc")` does this for `NamedTensors`
(`rltap.engines.base`; a `WeightFolder` still reloads from disk, the fallback);
`VLLMEngine(transfer=VLLMWeightTransfer("nccl", chunk_bytes=N))` sets the chunk size. One
update:

1. `POST /init_weight_transfer_engine`, once per connection: the trainer joins the transfer
   (NCCL: a process group of the trainer as rank 0 and every vLLM worker, its size from
   `GET /get_world_size`, at an address and free port of this host that the workers reach;
   IPC: nothing to join). vLLM is not paused yet.
2. `POST /pause?mode=wait`: the requests in flight finish on the old weights, every token the
   old version; new ones are held.
3. `POST /start_weight_update`: the workers prepare a layerwise reload (vLLM moves each
   layer's weights aside until all of that layer's tensors arrived); it does not pause.
4. `POST /update_weights` with the tensors' names, dtypes and shapes: NCCL, once, while the
   trainer broadcasts concurrently in packed chunks of at most `chunk_bytes` (plus one tensor);
   IPC, once per chunk, the chunk's handles (pickled, which the server must allow with
   `VLLM_ALLOW_INSECURE_SERIALIZATION=1`).
5. `POST /finish_weight_update` with the version: the workers finish the reload (kernels
   processed, LoRA state reset) and vLLM labels its weights with rltap's version.
6. `POST /reset_prefix_cache`: cached prefixes hold KV of the old weights.
7. rltap's version moves, then `POST /resume`: the held requests start on the new weights and
   their first tokens carry the new version.

Steps 1 and 3-5 are driven by vLLM's trainer-side engine
(`vllm.distributed.weight_transfer.WeightTransferTrainerFactory`, in `_vllm_transport`),
imported only when a sync first runs, so only the trainer's environment needs vllm. It talks
to the server through `TransferPhases`, this module's HTTP client with the four methods vLLM's
`VLLMWeightSyncClient` has. The transport is a seam (`WeightTransport`): tests pass one that
sends the tensors' bytes in the HTTP body (`rltap.testing.fakes.vllm_transfer`).

A failure raises `EngineError` naming the phase and the state vLLM is left in; the version
stays. Init failed: vLLM was never paused and serves on. Pause failed: rltap resumes it (the
weights were not touched). Any later phase: vLLM stays paused, as its weights may be half
updated (a layer moved aside serves nothing); the next update sends every weight again and
joins anew, or `POST /resume` serves what it holds. A failed finish may leave vLLM's workers
inside the update, which they then refuse to start again: restart the server.

LoRA adapters still go by folder (`/v1/load_lora_adapter`): they are small, and vLLM's
transfer loads base weights only.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import pickle
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from rltap.engines._http_errors import error_for_status
from rltap.engines.base import NamedTensors
from rltap.record.errors import EngineError

if TYPE_CHECKING:
    import torch

    from rltap.engines._http_client import EngineHTTPClient
    from rltap.engines.base import EngineBase

__all__ = [
    "CHUNK_BYTES",
    "TransferPhases",
    "VLLMWeightTransfer",
    "WeightTransport",
    "chunked",
    "rendezvous_address",
    "weight_transfer_for",
]

CHUNK_BYTES = 1 << 30  # vLLM's own default packed buffer
_SERVER = (
    "start vLLM with VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config "
    '\'{"backend": "%s"}\' (vLLM >= 0.32)'
)


class WeightTransport(Protocol):
    """Moves tensors into vLLM's workers while driving the transfer's phases on `phases`:
    `connect` calls `init_weight_transfer_engine` once, `send` calls `start_weight_update`,
    `update_weights` (once or per chunk) and `finish_weight_update`. Both run on a thread of
    their own, not the event loop."""

    def connect(self, phases: TransferPhases, source: NamedTensors) -> None: ...

    def send(self, source: NamedTensors) -> None: ...

    def close(self) -> None: ...


def chunked(
    tensors: Iterator[tuple[str, torch.Tensor]], max_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """`tensors` in consecutive chunks of at most `max_bytes` each (a larger tensor is a chunk
    of its own), holding one chunk at a time."""
    chunk: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, tensor))
        size += nbytes
    if chunk:
        yield chunk


class TransferPhases:
    """The server side of a transfer as vLLM's trainer-side engines call it (its
    `VLLMWeightSyncClient`: plain blocking methods, called from a transport's threads), each a
    request on the event loop of the update running now (`bind`). `phase` is the one called
    last; `version` is what `finish_weight_update` labels the weights."""

    def __init__(self, base_url: str, backend: str) -> None:
        self.base_url = base_url
        self._backend = backend
        self._client: EngineHTTPClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.phase = ""
        self.version: int | None = None

    def bind(self, client: EngineHTTPClient, version: int) -> None:
        """Send the requests of the update to `version` on `client`, on the running loop."""
        self._client = client
        self._loop = asyncio.get_running_loop()
        self.version = version
        self.phase = ""

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._call("init_weight_transfer_engine", {"init_info": init_info})

    def start_weight_update(self) -> None:
        self._call("start_weight_update", None)

    def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> None:
        wire: Any = (
            [_json_safe(info) for info in update_info]
            if isinstance(update_info, list)
            else _json_safe(update_info)
        )
        self._call("update_weights", {"update_info": wire})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        label = weight_version if self.version is None else str(self.version)
        self._call("finish_weight_update", None if label is None else {"weight_version": label})

    def world_size(self) -> int:
        """How many workers the server runs (tensor x pipeline x data parallel)."""
        reply = self._call("get_world_size", None, method="GET")
        if not isinstance(reply, dict) or not isinstance(reply.get("world_size"), int):
            msg = f"vLLM answered GET /get_world_size with {reply!r}"
            raise EngineError(msg)
        return int(reply["world_size"])

    def _call(self, phase: str, body: dict[str, Any] | None, method: str = "POST") -> Any:
        if self._loop is None:
            msg = f"{phase} called outside an update"
            raise RuntimeError(msg)
        self.phase = phase
        future = asyncio.run_coroutine_threadsafe(self.request(phase, body, method), self._loop)
        return future.result()

    async def request(
        self, phase: str, body: dict[str, Any] | None, method: str = "POST", **params: str
    ) -> Any:
        """One route of vLLM's weight-transfer API, named as its phase; its decoded reply."""
        self.phase = phase
        if self._client is None:
            msg = f"{phase} called outside an update"
            raise RuntimeError(msg)
        reply = await self._client.request(method, f"/{phase}", body, **params)
        if reply.status == 404:
            msg = f"vLLM at {self.base_url} has no /{phase} route: " + (_SERVER % self._backend)
            raise EngineError(msg)
        if reply.status >= 400:
            error = error_for_status(self._client.engine, reply.status, reply.payload)
            if phase == "update_weights" and self._backend == "ipc":
                # vLLM's workers refuse pickled IPC handles without it, as a bare HTTP 500.
                msg = f"{error.message} (is VLLM_ALLOW_INSECURE_SERIALIZATION=1 set for vLLM?)"
                raise EngineError(msg, is_retryable=error.is_retryable) from error
            raise error
        return reply.data


def _json_safe(update_info: dict[str, Any]) -> dict[str, Any]:
    """IPC handles travel pickled in vLLM's `ipc_handles_pickled` field over HTTP."""
    handles = update_info.get("ipc_handles")
    if handles is None:
        return update_info
    wire = {key: value for key, value in update_info.items() if key != "ipc_handles"}
    wire["ipc_handles_pickled"] = base64.b64encode(pickle.dumps(handles)).decode("ascii")
    return wire


class VLLMWeightTransfer:
    """One vLLM server's weight transfer (module docstring): `update` runs the phases and moves
    the engine's version. `transport` None: vLLM's own for `backend`, built on the
    first update."""

    def __init__(
        self,
        backend: str,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        transport: WeightTransport | None = None,
    ) -> None:
        if backend not in ("nccl", "ipc"):
            msg = f"unknown vLLM weight transfer {backend!r}: nccl or ipc (or folder)"
            raise ValueError(msg)
        self.backend = backend
        self.chunk_bytes = chunk_bytes
        self._transport = transport
        self._phases: TransferPhases | None = None
        self._connected = False
        self._lock = asyncio.Lock()

    async def update(
        self, client: EngineHTTPClient, source: NamedTensors, version: int, engine: EngineBase
    ) -> None:
        """Move `source` into the server and `engine`'s version to `version` just before it
        resumes; on any failure raise `EngineError`, the version as it was. One update at a
        time: a second waits for the first."""
        async with self._lock:
            if self._phases is None:
                self._phases = TransferPhases(client.base_url, self.backend)
            self._phases.bind(client, version)
            await self._update(self._phases, source, version, engine)

    async def _update(
        self, phases: TransferPhases, source: NamedTensors, version: int, engine: EngineBase
    ) -> None:
        if not self._connected:
            await self._run("init_weight_transfer_engine", phases, self._connect(phases), source)
            self._connected = True
        try:
            await phases.request("pause", {}, mode="wait")
        except EngineError as exc:
            raise await _resumed_after(phases, exc) from exc
        try:
            await self._run("start_weight_update", phases, self._send, source)
            await _reset_prefix_cache(phases)
        except EngineError as exc:
            raise _paused(phases.phase, exc, version) from exc
        old = engine.version
        engine.set_version(version)
        try:
            await phases.request("resume", {})
        except EngineError as exc:
            engine.set_version(old)
            raise _paused("resume", exc, version, weights_new=True) from exc

    def _connect(self, phases: TransferPhases) -> Callable[[NamedTensors], None]:
        def connect(source: NamedTensors) -> None:
            if self._transport is None:
                from rltap.engines import _vllm_transport  # needs vllm: the trainer's env only

                nccl = self.backend == "nccl"
                address = rendezvous_address(phases.base_url) if nccl else ""
                self._transport = _vllm_transport.VLLMTransport(
                    self.backend, self.chunk_bytes, address
                )
            self._transport.connect(phases, source)

        return connect

    def _send(self, source: NamedTensors) -> None:
        """`source` through the transport; every pass it opened is closed after, also one a
        failure left halfway (a sharded model's other ranks finish their gathers then)."""
        if self._transport is None:
            msg = "the weight transfer is not connected"
            raise RuntimeError(msg)
        opened: list[Iterator[tuple[str, torch.Tensor]]] = []

        def tensors() -> Iterator[tuple[str, torch.Tensor]]:
            opened.append(source.tensors())
            return opened[-1]

        try:
            self._transport.send(NamedTensors(source.specs, tensors))
        finally:
            for tensors_left in opened:
                close = getattr(tensors_left, "close", None)
                if close is not None:
                    close()

    async def _run(
        self,
        first: str,
        phases: TransferPhases,
        step: Callable[[NamedTensors], None],
        source: NamedTensors,
    ) -> None:
        """`step` on a thread; a failure in it (HTTP or the transport's own) as an
        `EngineError` naming its phase. The connection is dropped: the next update joins
        anew."""
        phases.phase = first
        try:
            await asyncio.to_thread(step, source)
        except Exception as exc:
            self._drop_connection()
            if first == "init_weight_transfer_engine":
                detail = exc.message if isinstance(exc, EngineError) else _describe(exc)
                msg = (
                    f"vLLM's weight transfer failed at {phases.phase}: {detail}; vLLM was not "
                    "paused and serves its weights as before"
                )
                raise EngineError(msg) from exc
            if isinstance(exc, EngineError):
                raise
            msg = f"the {self.backend} transfer failed: {_describe(exc)}"
            raise EngineError(msg) from exc

    def _drop_connection(self) -> None:
        if self._transport is not None and self._connected:
            try:
                self._transport.close()
            finally:
                self._connected = False


def weight_transfer_for(
    kind: str | None, transfer: VLLMWeightTransfer | None = None
) -> VLLMWeightTransfer | None:
    """The transfer a `VLLMEngine(weight_transfer=kind, transfer=transfer)` runs: `transfer`
    when given (its chunk size, its transport), else None for `folder` or None (weights reload
    from disk, `--weight-transfer`'s default) and vLLM's own `nccl` or `ipc` transfer
    otherwise."""
    if transfer is not None:
        return transfer
    return None if kind in (None, "folder") else VLLMWeightTransfer(kind)


def rendezvous_address(url: str) -> str:
    """This host's address as the vLLM server at `url` reaches it (where its workers join the
    trainer's NCCL group): loopback for a server on this machine, else the address of the
    interface the route to it leaves by."""
    host = urlsplit(url).hostname or "127.0.0.1"
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        loopback = False
    if loopback:
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # UDP: nothing is sent, the route is chosen
        return str(probe.getsockname()[0])


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def _reset_prefix_cache(phases: TransferPhases) -> None:
    reset = await phases.request("reset_prefix_cache", {})
    if not (isinstance(reset, dict) and reset.get("success") is True):
        msg = f"vLLM did not reset its prefix cache after the weight transfer: {reset}"
        raise EngineError(msg)


async def _resumed_after(phases: TransferPhases, exc: EngineError) -> EngineError:
    """The error of a failed pause, after resuming vLLM (its weights were not touched)."""
    try:
        await phases.request("resume", {})
        state = "resumed it: it serves its weights as before"
    except EngineError as resume:
        state = f"could not resume it ({resume.message}): POST /resume to serve again"
    msg = f"vLLM's weight transfer failed at pause: {exc.message}; rltap {state}"
    return EngineError(msg, is_retryable=exc.is_retryable)


def _paused(
    phase: str, exc: EngineError, version: int, *, weights_new: bool = False
) -> EngineError:
    if weights_new:
        held = f"it holds the weights of version {version} but rltap's version did not move"
    elif phase == "reset_prefix_cache":
        held = f"it holds the weights of version {version}, its prefix cache KV of the old ones"
    elif phase == "finish_weight_update":
        held = (
            "its weights may be half processed, and its workers may still be inside the "
            "update, refusing the next start_weight_update: then restart the server"
        )
    else:
        held = "its weights may be half updated"
    msg = (
        f"vLLM's weight transfer failed at {phase}: {exc.message}; vLLM stays paused ({held}): "
        "update again (every weight is sent anew), or POST /resume to serve what it holds"
    )
    return EngineError(msg, is_retryable=exc.is_retryable)
