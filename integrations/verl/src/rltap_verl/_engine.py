"""verl's own rollout servers as an rltap engine: token ids in, token ids and logprobs out.

`VerlServerEngine.stream` is one call of verl's server manager (`LLMServerClient.generate`,
which load-balances over verl's vLLM, SGLang or TensorRT-LLM replicas and keeps a session on
one of them): `generate(request_id=..., prompt_ids=..., sampling_params={...})` answers a
`TokenOutput` whose `extra_fields["global_steps"]` is the trainer step of the weights the
replica generated with. That step is rltap's policy version: each reply's tokens are stamped
with it, so an episode's branches carry verl's staleness tags.

verl's servers take no grammar and have no LoRA policy of rltap's naming, so a request with a
`Constraint` or a named policy is refused (`InvalidRequest`, a 400 to the agent) rather than
generated unconstrained. Weights are verl's to sync: `update_weights` is refused too.

Usage:
    engine = VerlServerEngine(agent_loop.server_manager, backend="vllm")
    response = await engine.generate(ModelRequest(input_ids=[9707, 11], max_new_tokens=16))
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import Any, ClassVar, Protocol

from rltap.config import ConfigError
from rltap.engines.base import DEFAULT_POLICY, EngineBase, WeightSource
from rltap.record.errors import EngineError, InvalidRequest
from rltap.record.types import LogprobConvention, ModelRequest, StopReason, TokenChunk

__all__ = ["ServerManager", "VerlServerEngine", "logprob_convention_of"]

# Where each of verl's rollout servers reads a request's seed from its sampling parameters
# (vLLM's and TensorRT-LLM's SamplingParams take `seed`, SGLang's `sampling_seed`).
_SEED_PARAM = {"vllm": "seed", "sglang": "sampling_seed", "trtllm": "seed"}
# verl's vLLM server passes rollout.logprobs_mode to vLLM; the two modes that are logprobs.
_VLLM_LOGPROBS = {
    "processed_logprobs": LogprobConvention.PROCESSED,
    "raw_logprobs": LogprobConvention.RAW,
}


class ServerManager(Protocol):
    """What the engine calls: the signature of verl's `LLMServerClient.generate`."""

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> Any: ...


def logprob_convention_of(rollout: Mapping[str, Any]) -> LogprobConvention:
    """The distribution the logprobs of verl's rollout config `rollout` come from: vLLM's
    `logprobs_mode`, SGLang's default (temperature-scaled, before top-p/top-k)."""
    name = rollout.get("name", "vllm")
    if name == "vllm":
        mode = rollout.get("logprobs_mode") or "processed_logprobs"
        if mode not in _VLLM_LOGPROBS:
            msg = (
                f"actor_rollout_ref.rollout.logprobs_mode={mode!r} returns logits, not logprobs; "
                f"rltap records logprobs: use one of {sorted(_VLLM_LOGPROBS)}"
            )
            raise ConfigError(msg)
        return _VLLM_LOGPROBS[mode]
    if name == "sglang":
        return LogprobConvention.TEMPERATURE_SCALED
    return LogprobConvention.PROCESSED


class VerlServerEngine(EngineBase):
    """verl's server manager (`LLMServerClient`) as an rltap `InferenceEngine`.

    `backend` is verl's `actor_rollout_ref.rollout.name` (where a seed goes); `version` the
    policy version until the first reply says its `global_steps`. Cancelling a stream stops
    waiting for its reply; verl's servers offer no per-request abort, so the replica finishes
    the request and its tokens are dropped.
    """

    takes_state_dict: ClassVar[bool] = False

    def __init__(
        self,
        server_manager: ServerManager,
        *,
        backend: str = "vllm",
        logprob_convention: LogprobConvention = LogprobConvention.PROCESSED,
        version: int = 0,
    ) -> None:
        super().__init__(version=version)
        self.server_manager = server_manager
        self.backend = backend
        self.logprob_convention = logprob_convention
        self._inflight: dict[str, asyncio.Task[Any]] = {}

    def sampling_params(self, request: ModelRequest) -> dict[str, Any]:
        """verl's `sampling_params` for `request`; `InvalidRequest` for what verl cannot honour."""
        if request.constraint is not None:
            msg = (
                f"verl's rollout servers take no grammar; {request.constraint.reason} needs "
                "constrained decoding, which rltap cannot honour through verl"
            )
            raise InvalidRequest(msg, param="response_format")
        if request.policy not in (None, DEFAULT_POLICY):
            msg = f"verl serves one policy; policy {request.policy!r} cannot be generated with"
            raise InvalidRequest(msg, param="model")
        params: dict[str, Any] = {
            "temperature": request.temperature,
            "top_p": request.top_p,
            "top_k": request.top_k if request.top_k > 0 else -1,  # verl's "no top-k"
            "max_tokens": request.max_new_tokens,
            "logprobs": True,
        }
        if request.stop_token_ids:
            params["stop_token_ids"] = list(request.stop_token_ids)
        if request.stop:
            params["stop"] = list(request.stop)
        if request.seed is not None:
            if self.backend not in _SEED_PARAM:
                msg = f"verl's {self.backend!r} rollout takes no seed; send the call unseeded"
                raise InvalidRequest(msg, param="seed")
            params[_SEED_PARAM[self.backend]] = request.seed
        return params

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        """One reply from verl's servers, as a single chunk once it is complete."""
        params = self.sampling_params(request)
        # A session's calls share verl's request id: its server manager keeps them on one
        # replica, where their common prefix is cached.
        sticky_id = request.session_id or request.request_id
        call = self.server_manager.generate(
            sticky_id, prompt_ids=list(request.input_ids), sampling_params=params
        )
        task: asyncio.Task[Any] = asyncio.ensure_future(call)
        self._inflight[request.request_id] = task
        try:
            output = await task
        except asyncio.CancelledError:
            if task.cancelled() and not _current_task_cancelling():
                yield TokenChunk(
                    token_ids=[], logprobs=[], versions=[], stop_reason=StopReason.ABORT
                )
                return
            raise
        except Exception as exc:
            msg = f"verl's server manager failed on request {request.request_id}: {exc}"
            raise EngineError(msg) from exc
        finally:
            self._inflight.pop(request.request_id, None)
        yield self._chunk(request, output)

    def _chunk(self, request: ModelRequest, output: Any) -> TokenChunk:
        token_ids = [int(t) for t in output.token_ids]
        logprobs = output.log_probs
        if token_ids and (logprobs is None or len(logprobs) != len(token_ids)):
            got = "none" if logprobs is None else len(logprobs)
            msg = f"verl's server sent {len(token_ids)} tokens with {got} logprobs"
            raise EngineError(msg)
        steps = (output.extra_fields or {}).get("global_steps")
        if isinstance(steps, int):  # None until verl's first weight sync
            self.set_version(steps)
        return TokenChunk(
            token_ids=token_ids,
            logprobs=[float(p) for p in logprobs or []],
            versions=[self.version] * len(token_ids),
            stop_reason=_stop_reason(request, output.stop_reason, token_ids),
        )

    async def abort(self, request_id: str) -> None:
        """Stop waiting for `request_id`; its stream ends with stop reason `abort`."""
        task = self._inflight.get(request_id)
        if task is not None:
            task.cancel()

    async def update_weights(self, source: WeightSource, *, version: int | None = None) -> int:
        """Refused: verl syncs its rollout's weights itself (the version follows its steps)."""
        msg = (
            "verl syncs its rollout servers' weights itself; rltap reads the version from each "
            "reply's global_steps"
        )
        raise InvalidRequest(msg)

    async def start(self) -> None:
        """Nothing to acquire: verl's server manager is already connected."""

    async def close(self) -> None:
        """Stop waiting for every reply in flight."""
        for task in list(self._inflight.values()):
            task.cancel()


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _stop_reason(request: ModelRequest, reason: str | None, token_ids: list[int]) -> StopReason:
    # verl's vLLM server reports "completed" for both a stop and the length limit, SGLang
    # "stop" or "length"; the last token tells a stop token from the limit.
    if reason in ("aborted", "abort"):
        return StopReason.ABORT
    if token_ids and token_ids[-1] in request.stop_token_ids:
        return StopReason.STOP
    if reason == "length" or len(token_ids) >= request.max_new_tokens:
        return StopReason.LENGTH
    return StopReason.STOP
