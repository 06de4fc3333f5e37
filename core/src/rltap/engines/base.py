"""The protocol every inference engine implements, and the base class rltap's engines share.

Weight updates follow one shape for every engine (verl's `BaseRollout.update_weights`): the
engine is handed the new weights and the policy version they are, and returns once it
generates with them. The weights are a `WeightSource`: a state dict of this process, which an
engine running here copies in place, or a `WeightFolder` (a Hugging Face folder of safetensors
shards), which a server engine has its server load. `takes_state_dict` says which one an engine
wants, so a trainer saves to disk only for an engine that needs it.

A LoRA trainer (`rltap train --lora-rank`) sends only its adapter: an `AdapterWeights` (the peft
config and the adapter's tensors) to an engine in this process, which injects the same adapter
into its model the first time and copies the tensors in place; a `WeightFolder` with
`adapter=True` (peft's `save_pretrained` output) to a server engine, which loads it as a LoRA
adapter (vLLM's `/v1/load_lora_adapter`).

Several policies over one base model (a LoRA adapter per group of agents) each have a name: an
`AdapterWeights` carries its policy's `name`, a `ModelRequest` the `policy` it generates with,
and the engine keeps a version per policy (`policy_version`). The adapter named
`DEFAULT_POLICY` is a single-policy run's adapter, whose version is `version`.

An engine whose server receives weights over the wire from the trainer's memory (vLLM with
`weight_transfer` nccl or ipc, `rltap.engines.vllm_transfer`) takes `NamedTensors`: the
model's tensors one at a time, never whole in one place, and says so with a true
`takes_named_tensors` attribute (absent means false). Such an engine still takes a
`WeightFolder`, its fallback.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias, runtime_checkable

from rltap.record.types import LogprobConvention, ModelRequest, ModelResponse, TokenChunk

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_POLICY",
    "AdapterWeights",
    "EngineBase",
    "InferenceEngine",
    "NamedTensors",
    "TensorSpec",
    "WeightFolder",
    "WeightSource",
    "save_weights",
]


@dataclass(frozen=True, slots=True)
class WeightFolder:
    """Weights as a Hugging Face folder (config and `*.safetensors` shards) at `path`.

    `save`, when given, writes the weights there: the engine calls it once it has checked that
    it can load weights at all, so a server that cannot fails before a long save. Without it
    the folder is already written (by a trainer on a disk this machine shares). A server engine
    sends `path` resolved here; the server must read it (same machine or a shared disk).

    `adapter`: the folder holds a peft LoRA adapter (`adapter_config.json` and
    `adapter_model.safetensors`) for the base model the server serves, not a whole model.

    Usage:
        await engine.update_weights(WeightFolder(Path("RUN/sync"), save=write_model), version=3)
    """

    path: Path
    save: Callable[[Path], Awaitable[None]] | None = None
    adapter: bool = False

    async def written(self) -> Path:
        """The absolute folder, after `save` (if any) wrote it."""
        path = self.path.resolve()
        if self.save is not None:
            await self.save(path)
        return path


# The adapter (and policy) name of a single-policy run, peft's default adapter name.
DEFAULT_POLICY = "default"


@dataclass(frozen=True, slots=True)
class AdapterWeights:
    """A LoRA adapter for an engine in this process: `config` is the trainer's peft
    `LoraConfig` (its `target_modules` resolved), `tensors` the adapter's tensors named as in
    the base model once peft injected the adapter (`model.layers.0.self_attn.q_proj.lora_A.
    default.weight`). The engine injects the same adapter into its model on the first update
    (`peft.inject_adapter_in_model`) and then copies `tensors` in place; its base weights stay.

    `name` is the policy the adapter is (the requests whose `policy` names it generate with
    it); its tensors carry it where peft names the adapter (`...q_proj.lora_A.tutor.weight`).
    The default, `DEFAULT_POLICY`, is a single-policy run's adapter.
    """

    config: Any
    tensors: Mapping[str, torch.Tensor]
    name: str = DEFAULT_POLICY


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One tensor a `NamedTensors` yields: its name (as in the model's state dict), its dtype
    and its whole shape (a sharded tensor's global shape)."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count * self.dtype.itemsize


@dataclass(frozen=True, slots=True)
class NamedTensors:
    """A model's weights as `(name, tensor)` pairs, one whole tensor at a time, for an engine
    whose server receives them from this process (`takes_named_tensors`).

    `specs` declares every tensor up front without materialising any (a receiver sizes its
    buffers from it); `tensors()` starts a fresh pass that yields them in exactly that order,
    each whole (a sharded model gathers it then: every trainer rank must take part in each
    pass). A tensor may stay on its device; the engine copies it out before the next one.

    Usage:
        source = NamedTensors(specs, lambda: iter(model.state_dict().items()))
        await engine.update_weights(source, version=3)
    """

    specs: tuple[TensorSpec, ...]
    tensors: Callable[[], Iterator[tuple[str, torch.Tensor]]]


# A state dict (parameter name -> tensor), a folder of saved weights, a LoRA adapter, or a
# model's tensors one at a time.
WeightSource: TypeAlias = (
    "Mapping[str, torch.Tensor] | WeightFolder | AdapterWeights | NamedTensors"
)


@runtime_checkable
class InferenceEngine(Protocol):
    """Token ids in, token ids with logprobs and policy versions out.

    `stream` yields `TokenChunk`s as tokens are produced; the last chunk carries the stop reason.
    Closing the stream early (`aclose`, or cancelling the task consuming it) aborts the request
    and frees its slot. `generate` is `stream` collected into one `ModelResponse`. Failures raise
    `rltap.record.errors.EngineError` (or a subclass) with `is_retryable` set.
    """

    logprob_convention: LogprobConvention
    # True: `update_weights` takes a state dict (the engine runs in this process); False: it
    # needs a `WeightFolder` its server reads.
    takes_state_dict: ClassVar[bool]

    @property
    def version(self) -> int:
        """The policy version new tokens are generated with."""
        ...

    def set_version(self, version: int) -> None:
        """Declare the policy version (weights changed by someone else than `update_weights`)."""
        ...

    async def update_weights(self, source: WeightSource, *, version: int | None = None) -> int:
        """Generate with the weights of `source` from now on, tokens stamped `version` (default:
        the current version plus one); returns the new version. Every weight of the engine's
        model must be in `source`. A failed update raises `EngineError` and keeps the version;
        a source the engine cannot take raises `InvalidRequest`."""
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
    """What rltap's engines share: the policy-version counters stamped on the tokens they hand
    out, and `generate` as `stream` collected (an engine with a cheaper one-shot call overrides
    it). A subclass implements `stream`, `abort`, `start`, `close` and `update_weights`.

    `version` is the base model's (or a single-policy run's) version; each named policy has its
    own (`policy_version`), the engine's starting version until an update moves it."""

    logprob_convention: LogprobConvention
    takes_state_dict: ClassVar[bool]

    def __init__(self, *, version: int = 0) -> None:
        self._version = version
        self._start_version = version
        self._policy_versions: dict[str, int] = {}

    @property
    def version(self) -> int:
        """The policy version stamped on tokens generated from now on."""
        return self._version

    def policy_version(self, policy: str | None) -> int:
        """The version stamped on the tokens of requests with `policy` (None or
        `DEFAULT_POLICY`: `version`)."""
        if policy is None or policy == DEFAULT_POLICY:
            return self._version
        return self._policy_versions.get(policy, self._start_version)

    def set_version(self, version: int) -> None:
        """Declare the policy version (weights changed by someone else than `update_weights`)."""
        self._version = version

    def set_policy_version(self, policy: str | None, version: int) -> None:
        """Declare the version of `policy` (None or `DEFAULT_POLICY`: `set_version`)."""
        if policy is None or policy == DEFAULT_POLICY:
            self.set_version(version)
        else:
            self._policy_versions[policy] = version

    def next_version(self, version: int | None, *, policy: str | None = None) -> int:
        """The version an update of `policy` to `version` moves to (None: its current one plus
        one)."""
        return self.policy_version(policy) + 1 if version is None else version

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
    async def update_weights(self, source: WeightSource, *, version: int | None = None) -> int:
        """Generate with `source`'s weights from now on; returns the new version."""

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


async def save_weights(model: Any, folder: Path) -> None:
    """Write `model` as a Hugging Face folder (config and safetensors shards) into `folder`,
    off the event loop; a previous save's shards are replaced."""
    save = getattr(model, "save_pretrained", None)
    if not callable(save):
        msg = (
            "saving weights for a server engine takes save_pretrained (a Hugging Face "
            f"PreTrainedModel); got {type(model).__name__}"
        )
        raise TypeError(msg)

    def write() -> None:
        folder.mkdir(parents=True, exist_ok=True)
        save(str(folder))

    await asyncio.to_thread(write)
