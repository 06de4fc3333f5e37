"""vLLM's trainer-side weight-transfer engines (NCCL, CUDA IPC) as an rltap `WeightTransport`.

Imported by `rltap.engines.vllm_transfer` when a sync first runs, so only the trainer's
environment (a GPU user's, with vllm installed) needs vllm. vLLM's engine does the work:
`WeightTransferTrainerFactory.trainer_init` joins the transfer (NCCL: the trainer is rank 0 of
a process group with every vLLM worker), `send_weights` drives start, update and finish and
moves the tensors, packed in buffers of `chunk_bytes`. This module only adapts rltap's
`NamedTensors` to vLLM's `WeightSource` and opens the NCCL rendezvous on a free port.

Written against vLLM 0.32.0 (`vllm.distributed.weight_transfer`).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

try:
    from vllm.distributed.weight_transfer import (  # type: ignore[import-not-found]
        ParamMeta,
        WeightSource,
        WeightTransferTrainerFactory,
    )
    from vllm.distributed.weight_transfer.ipc_engine import (  # type: ignore[import-not-found]
        IPCTrainerInitInfo,
    )
    from vllm.distributed.weight_transfer.nccl_engine import (  # type: ignore[import-not-found]
        NCCLTrainerInitInfo,
    )
except ImportError as exc:
    msg = (
        "vLLM's weight transfer (--weight-transfer nccl or ipc) runs vLLM's trainer-side "
        "code: install vllm (>= 0.32) in the trainer's environment, or use --weight-transfer "
        f"folder ({exc})"
    )
    raise ImportError(msg) from exc

if TYPE_CHECKING:
    from rltap.engines.base import NamedTensors

__all__ = ["VLLMTransport"]


class _Current(WeightSource):  # type: ignore[misc]
    """The sync's `NamedTensors` as vLLM's re-iterable `WeightSource` (set before each send:
    vLLM's engine keeps the source it joined with)."""

    def __init__(self, source: NamedTensors) -> None:
        self.source = source

    def metadata(self) -> list[Any]:
        return [ParamMeta(spec.name, spec.dtype, tuple(spec.shape)) for spec in self.source.specs]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self.source.tensors():
            if not tensor.is_cuda:
                msg = (
                    f"vLLM's weight transfer sends from a CUDA device, but {name} is on "
                    f"{tensor.device}: train on the GPU, or use --weight-transfer folder"
                )
                raise ValueError(msg)
            yield name, tensor


class VLLMTransport:
    """vLLM's NCCL or IPC trainer engine; NCCL's workers join the trainer at `address`."""

    def __init__(self, backend: str, chunk_bytes: int, address: str) -> None:
        if not torch.cuda.is_available():
            msg = (
                f"vLLM's {backend} weight transfer needs a CUDA device in the trainer's "
                "process: use --weight-transfer folder"
            )
            raise RuntimeError(msg)
        self.backend = backend
        self.chunk_bytes = chunk_bytes
        self.address = address
        self._source: _Current | None = None
        self._engine: Any = None

    def connect(self, phases: Any, source: NamedTensors) -> None:
        """Join the transfer; `phases` is the `rltap.engines.vllm_transfer.TransferPhases`
        vLLM's engine drives the server with (its `VLLMWeightSyncClient`)."""
        self._source = _Current(source)
        info: Any
        if self.backend == "nccl":
            info = NCCLTrainerInitInfo(
                master_address=self.address,
                master_port=_free_port(),
                world_size=1 + phases.world_size(),
                packed=True,
                packed_buffer_size_bytes=self.chunk_bytes,
                rank=0,
            )
        else:
            info = IPCTrainerInitInfo(
                packed=True, packed_buffer_size_bytes=self.chunk_bytes, rank=0
            )
        self._engine = WeightTransferTrainerFactory.trainer_init(
            info, client=phases, source=self._source
        )

    def send(self, source: NamedTensors) -> None:
        if self._engine is None or self._source is None:
            msg = "the weight transfer is not connected"
            raise RuntimeError(msg)
        self._source.source = source
        self._engine.send_weights()

    def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            engine.shutdown()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
