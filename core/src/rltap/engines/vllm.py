"""vLLM over HTTP: token ids in, token ids with logprobs out, through `vllm serve`'s OpenAI server.

Each request is one `POST /v1/completions` whose prompt is the token-id list itself, with
`return_token_ids` (vLLM >= 0.10.2) so the reply carries the exact prompt and output ids, and
`logprobs: 0` so it carries the sampled token's logprob. vLLM reports raw logprobs,
log_softmax(logits) before temperature and filtering, unless the server was started with
`--logprobs-mode processed_logprobs`; pass the matching `logprob_convention`.

A `Constraint` goes in vLLM's `structured_outputs` field (vLLM >= 0.11; the older `guided_json`
/ `guided_grammar` fields are gone): a reply that is one JSON value as `{"json": schema}`, which
every vLLM backend takes, anything else (a tool call, tool call | schema) as `{"grammar": lark}`
in llguidance's Lark dialect, which needs vLLM's guidance backend (`auto` falls back to it when
xgrammar cannot read a grammar). Start vLLM with `--structured-outputs-config '{"backend":
"guidance"}'`: it runs the same library as the embedded engine, and it honours the compact-JSON
option the schema carries (`x-guidance`); vLLM takes whitespace settings from its server config
only, so an xgrammar server needs `"disable_any_whitespace": true` there for compact JSON. The
logprobs stay vLLM's own (raw by default), as without a constraint.

vLLM does not know rltap's policy versions: the engine keeps the counter that `set_version`
moves after a trainer pushed new weights, and stamps it on every token it receives.

Closing a stream (or `abort(request_id)`) drops its connection; vLLM aborts it, freeing its slot.

`update_weights(WeightFolder(...))` reloads the weights through vLLM's development API, which a
server started with `VLLM_SERVER_DEV_MODE=1` exposes (vLLM >= 0.32): `GET /is_paused` first (a
server without the API fails before the folder is saved), then `POST /pause?mode=wait`,
`POST /collective_rpc` running the workers' `reload_weights` from the folder,
`POST /reset_prefix_cache` (cached prefixes hold KV of the old weights),
`POST /update_weight_version`, and `POST /resume`. `mode=wait` lets the requests in flight
finish with the old weights (every one of their tokens is the old version, as stamped) and
holds new ones until the resume: `abort` would throw rollouts away and `keep` would continue
them on KV caches computed with the old weights. A long generation therefore delays the update.
rltap's version moves just before the resume, because the held requests start the moment vLLM
resumes and their first tokens must carry the new version; the requests that finished under
`wait` had been answered before `/pause` returned. If a step after the pause fails, vLLM stays
paused (its weights may be half loaded) and the error says so. With `weight_transfer` nccl or
ipc, `NamedTensors` go by vLLM's weight-transfer API instead (`rltap.engines.vllm_transfer`).

`update_weights(WeightFolder(..., adapter=True))` serves a LoRA adapter instead, through vLLM's
runtime LoRA API (`rltap.engines.vllm_lora`: the server's flags, the names, the unloading):
each version loads under a name of its own, which the requests sent from then on give as their
`model`; requests in flight finish on the adapter they named, their tokens stamped with its
version, with no pause. `policy=P` (`rltap train` with `[policies]`) loads policy P's adapter
and moves P's version only (`policy_version`): a request whose `policy` is P names P's latest
adapter and carries its version, or, before P's first adapter, generates with the base model
(a new LoRA adapter adds zero) at P's starting version. Without a policy (or `DEFAULT_POLICY`)
the adapter is a single-policy run's, at `version`. Each version needs a folder of its own, as
vLLM may read an adapter from disk again (`rltap.train.sync` writes `adapter-v<N>/`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import Any

import orjson

from rltap.engines._http import EventReader, HTTPEngineBase
from rltap.engines._http_client import EngineHTTPClient
from rltap.engines._http_errors import error_for_status
from rltap.engines.base import NamedTensors, WeightFolder, WeightSource
from rltap.engines.vllm_lora import ServedAdapters, named_policy
from rltap.engines.vllm_transfer import VLLMWeightTransfer, weight_transfer_for
from rltap.record.errors import EngineError, InvalidRequest
from rltap.record.types import (
    Constraint,
    LogprobConvention,
    ModelRequest,
    ModelResponse,
    StopReason,
    TokenChunk,
)

__all__ = ["VLLMEngine", "completion_body"]

_ENGINE = "vLLM"
_COMPLETIONS = "/v1/completions"
_DEV_MODE = "VLLM_SERVER_DEV_MODE=1"


def completion_body(request: ModelRequest, model: str | None, *, stream: bool) -> dict[str, Any]:
    """The `/v1/completions` JSON body that generates `request` token for token."""
    body: dict[str, Any] = {
        "prompt": request.input_ids,
        "max_tokens": request.max_new_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "logprobs": 0,
        "return_token_ids": True,
        # Tokens as "token_id:N" spares the server a detokenization per logprob entry.
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
        "include_stop_str_in_output": True,
        "request_id": request.request_id,
        "stream": stream,
    }
    if model is not None:
        body["model"] = model
    if request.top_k > 0:
        body["top_k"] = request.top_k
    if request.seed is not None:
        body["seed"] = request.seed
    if request.stop_token_ids:
        body["stop_token_ids"] = request.stop_token_ids
    if request.stop:
        body["stop"] = request.stop
    if request.constraint is not None:
        body["structured_outputs"] = structured_outputs(request.constraint)
    return body


def structured_outputs(constraint: Constraint) -> dict[str, Any]:
    """vLLM's `structured_outputs` request field for `constraint`."""
    schema = constraint.json_schema
    if schema is None:
        return {"grammar": constraint.grammar}
    # Compact JSON: vLLM reads whitespace only from its server config, llguidance (the
    # guidance backend) also from the schema's own `x-guidance` options.
    options = schema.get("x-guidance")
    compact = {**(options if isinstance(options, dict) else {}), "whitespace_flexible": False}
    return {"json": {**schema, "x-guidance": compact}}


def _stop_reason(finish_reason: str) -> StopReason:
    if finish_reason == "length":
        return StopReason.LENGTH
    if finish_reason == "abort":
        return StopReason.ABORT
    return StopReason.STOP  # "stop", and vLLM's extra reasons such as repetition detection


def _choice(data: Any) -> dict[str, Any]:
    if isinstance(data, dict) and "error" in data:
        error = data["error"]
        code = error.get("code") if isinstance(error, dict) else None
        status = code if isinstance(code, int) and code >= 400 else 500
        raise error_for_status(_ENGINE, status, orjson.dumps(data))
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError) as exc:
        msg = f"{_ENGINE} sent a completion without choices: {str(data)[:500]}"
        raise EngineError(msg) from exc
    if not isinstance(choice, dict):
        msg = f"{_ENGINE} sent a malformed choice: {str(choice)[:500]}"
        raise EngineError(msg)
    return choice


def _tokens_and_logprobs(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    token_ids = choice.get("token_ids") or []
    logprobs = choice.get("logprobs") or {}
    token_logprobs = logprobs.get("token_logprobs") or []
    if len(token_logprobs) != len(token_ids) or any(lp is None for lp in token_logprobs):
        msg = (
            f"{_ENGINE} sent {len(token_ids)} token ids but {len(token_logprobs)} logprobs; "
            "is the server older than vLLM 0.10.2 (no return_token_ids)?"
        )
        raise EngineError(msg)
    return list(token_ids), [float(lp) for lp in token_logprobs]


def _check_prompt(choice: dict[str, Any], input_ids: list[int]) -> None:
    # The ids vLLM consumed must be the ids rltap records as the prompt.
    prompt_ids = choice.get("prompt_token_ids")
    if prompt_ids is not None and prompt_ids != input_ids:
        msg = (
            f"{_ENGINE} consumed a different prompt ({len(prompt_ids)} ids) than was sent "
            f"({len(input_ids)} ids)"
        )
        raise EngineError(msg)


class VLLMEngine(HTTPEngineBase):
    """A `vllm serve` OpenAI-compatible server as an rltap `InferenceEngine`.

    `url` is the server root (`http://host:8000`, with or without `/v1`). `model` defaults to
    the first model the server lists. `timeout` is how long the server may stay silent (a whole
    non-streamed generation, or the gap between streamed chunks).

    Usage:
        engine = VLLMEngine("http://127.0.0.1:8000")
        response = await engine.generate(ModelRequest(input_ids=[9707, 11], max_new_tokens=16))
        await engine.close()
    """

    engine_name = _ENGINE
    request_path = _COMPLETIONS
    serves_adapters = True

    def __init__(
        self,
        url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float | None = 600.0,
        connect_timeout: float = 10.0,
        version: int = 0,
        logprob_convention: LogprobConvention = LogprobConvention.RAW,
        max_connections: int = 0,
        weight_transfer: str | None = None,
        transfer: VLLMWeightTransfer | None = None,
    ) -> None:
        base_url = url.rstrip("/").removesuffix("/v1")
        super().__init__(
            base_url,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            version=version,
            logprob_convention=logprob_convention,
            max_connections=max_connections,
        )
        self.model = model
        self._lora = ServedAdapters()
        self._transfer = weight_transfer_for(weight_transfer, transfer)  # None: folder
        self.takes_named_tensors = self._transfer is not None

    async def start(self) -> None:
        """Open the session and discover the served model name if none was given."""
        if self.model is None:
            self.model = await self._discover_model()

    async def _discover_model(self) -> str:
        data = await self._client.get_json("/v1/models")
        try:
            return str(data["data"][0]["id"])
        except (KeyError, IndexError, TypeError) as exc:
            msg = f"{_ENGINE} at {self.url} lists no model: {str(data)[:500]}"
            raise EngineError(msg) from exc

    @property
    def adapter(self) -> tuple[str, int] | None:
        """The single-policy run's LoRA adapter requests name and its version; None: none."""
        return self._lora.served(None)

    def _served(self, request: ModelRequest) -> tuple[str | None, int] | None:
        """The model `request` names and its tokens' version, fixed when it is sent; None: the
        model, at the engine's version as each token arrives (a reload pauses vLLM)."""
        policy = named_policy(request.policy)
        adapter = self._lora.served(policy)
        if adapter is None and policy is not None:  # no adapter yet: the base model's tokens
            return self.model, self.policy_version(policy)
        return adapter

    def request_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        served = self._served(request)
        return completion_body(request, self.model if served is None else served[0], stream=stream)

    def _versions(self, n: int, served: tuple[str | None, int] | None) -> list[int]:
        return [self._version if served is None else served[1]] * n

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Generate `request` in one non-streamed call."""
        await self.start()
        started = time.perf_counter()
        body = self.request_body(request, stream=False)
        served = self._served(request)
        data: Any = None
        entry = self._inflight.add(request.request_id, cancel_task=True)
        try:
            data = await self._client.post_json(_COMPLETIONS, body)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not entry.aborted or task is None or task.uncancel() > 0:
                raise
        finally:
            self._inflight.remove(request.request_id)
        if data is None:  # aborted before vLLM answered: nothing was produced
            return self.aborted_response(request, started)
        choice = _choice(data)
        _check_prompt(choice, request.input_ids)
        token_ids, logprobs = _tokens_and_logprobs(choice)
        return ModelResponse(
            input_tokens=list(request.input_ids),
            output_tokens=token_ids,
            output_logprobs=logprobs,
            output_versions=self._versions(len(token_ids), served),
            stop_reason=_stop_reason(str(choice.get("finish_reason") or "stop")),
            logprob_convention=self.logprob_convention,
            constrained=request.constraint is not None,
            latency=time.perf_counter() - started,
        )

    def event_reader(self, request: ModelRequest) -> EventReader:
        return functools.partial(self._chunk, request, self._served(request))

    def _chunk(
        self, request: ModelRequest, served: tuple[str | None, int] | None, payload: bytes
    ) -> TokenChunk | None:
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            msg = f"{_ENGINE} sent an invalid stream event: {payload[:200]!r}"
            raise EngineError(msg) from exc
        if isinstance(data, dict) and not data.get("choices") and "error" not in data:
            return None  # the usage-only event at the end of a stream
        choice = _choice(data)
        _check_prompt(choice, request.input_ids)
        token_ids, logprobs = _tokens_and_logprobs(choice)
        finish_reason = choice.get("finish_reason")
        if not token_ids and finish_reason is None:
            return None
        return TokenChunk(
            token_ids=token_ids,
            logprobs=logprobs,
            versions=self._versions(len(token_ids), served),
            stop_reason=None if finish_reason is None else _stop_reason(str(finish_reason)),
        )

    async def abort(self, request_id: str) -> None:
        """Abort a request in flight by dropping its connection; a no-op if it is done."""
        self._inflight.abort(request_id)

    async def check_weight_reload(self, client: EngineHTTPClient) -> None:
        await _dev_call(client, "GET", "/is_paused")

    async def reload_weights(self, client: EngineHTTPClient, folder: Path, version: int) -> None:
        await _dev_call(client, "POST", "/pause", {}, mode="wait")
        try:
            await self._reload_paused(client, folder, version)
        except EngineError as exc:
            msg = (
                f"{exc.message}; vLLM stays paused (its weights may be half loaded): update "
                "again, or POST /resume to serve what it holds"
            )
            raise EngineError(msg, is_retryable=exc.is_retryable) from exc
        await _dev_call(client, "POST", "/resume", {})

    async def _reload_paused(self, client: EngineHTTPClient, folder: Path, version: int) -> None:
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}
        await _dev_call(client, "POST", "/collective_rpc", rpc)
        reset = await _dev_call(client, "POST", "/reset_prefix_cache", {})
        if not (isinstance(reset, dict) and reset.get("success") is True):
            msg = f"vLLM did not reset its prefix cache after reloading the weights: {reset}"
            raise EngineError(msg)
        await _dev_call(client, "POST", "/update_weight_version", {"new_version": str(version)})
        self._version = version

    async def transfer_weights(
        self, client: EngineHTTPClient, source: NamedTensors, version: int
    ) -> None:
        if self._transfer is not None:
            await self._transfer.update(client, source, version, self)

    async def update_weights(
        self, source: WeightSource, *, version: int | None = None, policy: str | None = None
    ) -> int:
        """Have the server load `source` (`HTTPEngineBase.update_weights`), or with `policy` the
        LoRA adapter folder `source` as that policy's; returns the new version."""
        named = named_policy(policy)
        if named is None:
            return await super().update_weights(source, version=version)
        taken = self._taken(source)
        if not (isinstance(taken, WeightFolder) and taken.adapter):
            msg = f"policy {named!r} takes a LoRA adapter: WeightFolder(path, adapter=True)"
            raise InvalidRequest(msg)
        new_version = self.next_version(version, policy=named)
        await self.start()
        client = self._client.detached()
        try:
            await self._lora.load(client, await taken.written(), new_version, named)
        finally:
            await client.close()
        self.set_policy_version(named, new_version)
        return new_version

    async def load_adapter(self, client: EngineHTTPClient, folder: Path, version: int) -> None:
        """Load a single-policy run's adapter in `folder` under this version's name; requests
        without a policy name it from now on (module docstring)."""
        await self.start()
        await self._lora.load(client, folder, version, None)
        self._version = version


async def _dev_call(
    client: EngineHTTPClient,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    **params: str,
) -> Any:
    """One call of vLLM's development API; its decoded reply."""
    reply = await client.request(method, path, body, **params)
    if reply.status == 404:
        msg = (
            f"vLLM at {client.base_url} has no {path} route: updating its weights needs vLLM's "
            f"development API; start the server with {_DEV_MODE} in its environment"
        )
        raise EngineError(msg)
    if reply.status >= 400:
        raise error_for_status(client.engine, reply.status, reply.payload)
    return reply.data
