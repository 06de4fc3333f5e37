"""SGLang over HTTP: token ids in, token ids with logprobs out, through its native `/generate`.

Each request is one `POST /generate` with `input_ids`, `sampling_params` and
`return_logprob: true`; the reply's `meta_info.output_token_logprobs` holds one
`[logprob, token_id, text]` triple per output token and `meta_info.finish_reason` says why it
stopped (`{"type": "stop" | "length" | "abort", ...}`). The request carries rltap's request id
as SGLang's `rid`, so `abort(request_id)` is SGLang's own `POST /abort_request`, and the
partial output comes back with finish reason `abort`.

Streams are server-sent `data:` events ending with `data: [DONE]`. By default each event is
cumulative (everything generated so far); a server started with
`--incremental-streaming-output` sends deltas instead. Both are read the same way: an event's
`output_token_logprobs` end at `meta_info.completion_tokens`, so the tokens not yet emitted are
the tail past what this client already has.

SGLang's default logprob is log_softmax(logits / temperature) before top-p/top-k filtering
(`LogprobConvention.TEMPERATURE_SCALED`); a server run with `SGLANG_RETURN_ORIGINAL_LOGPROB=1`
reports raw logprobs: pass `logprob_convention=LogprobConvention.RAW` then. SGLang's own
`weight_version` is a free-form string, so the policy version is the engine-side counter that
`set_version` moves, as for vLLM.

A `Constraint` goes in SGLang's sampling parameters: a reply that is one JSON value as
`json_schema` (the schema as a JSON string; every grammar backend takes it), anything else as
`ebnf` holding the llguidance Lark grammar, which needs a server started with
`--grammar-backend llguidance` (its `ebnf` reads Lark; xgrammar, the default, reads GBNF only).
The logprobs keep the server's convention, as without one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from rltap.engines._http import EventReader, HTTPEngineBase
from rltap.engines._http_errors import error_for_status
from rltap.record.errors import EngineError
from rltap.record.types import (
    Constraint,
    LogprobConvention,
    ModelRequest,
    ModelResponse,
    StopReason,
    TokenChunk,
)

__all__ = ["SGLangEngine", "generate_body"]

_ENGINE = "SGLang"
_GENERATE = "/generate"


def generate_body(request: ModelRequest, *, stream: bool) -> dict[str, Any]:
    """The `/generate` JSON body that generates `request` token for token."""
    sampling: dict[str, Any] = {
        "max_new_tokens": request.max_new_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "skip_special_tokens": False,
        "no_stop_trim": True,  # keep a matched stop string in the text, as the tokens do
    }
    if request.top_k > 0:  # SGLang disables top-k with -1 and rejects 0
        sampling["top_k"] = request.top_k
    if request.stop:
        sampling["stop"] = request.stop
    if request.stop_token_ids:
        sampling["stop_token_ids"] = request.stop_token_ids
    if request.seed is not None:
        sampling["sampling_seed"] = request.seed
    if request.constraint is not None:
        sampling.update(constraint_params(request.constraint))
    return {
        "input_ids": request.input_ids,
        "sampling_params": sampling,
        "return_logprob": True,
        "stream": stream,
        "rid": request.request_id,
    }


def constraint_params(constraint: Constraint) -> dict[str, str]:
    """SGLang's sampling parameter for `constraint`."""
    if constraint.json_schema is not None:
        return {"json_schema": orjson.dumps(constraint.json_schema).decode()}
    return {"ebnf": constraint.grammar}


def _finish(meta_info: dict[str, Any]) -> StopReason | None:
    """The stop reason of a finished output; raises for an abort that reports an error."""
    reason = meta_info.get("finish_reason")
    if reason is None:
        return None
    kind = reason.get("type") if isinstance(reason, dict) else reason
    if kind == "length":
        return StopReason.LENGTH
    if kind != "abort":
        return StopReason.STOP
    status = reason.get("status_code") if isinstance(reason, dict) else None
    if isinstance(status, int) and status >= 400:  # SGLang rejected or shed the request
        raise error_for_status(_ENGINE, status, orjson.dumps(reason))
    return StopReason.ABORT


def _decode(payload: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        msg = f"{_ENGINE} sent invalid JSON: {payload[:200]!r}"
        raise EngineError(msg) from exc
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict):
        msg = f"{_ENGINE} sent an unexpected body: {payload[:200]!r}"
        raise EngineError(msg)
    if "error" in data:
        # A failure after the stream started: SGLang sends its ValueErrors (invalid input) so.
        raise error_for_status(_ENGINE, 400, payload)
    if not isinstance(data.get("meta_info"), dict):
        msg = f"{_ENGINE} sent an output without meta_info: {payload[:200]!r}"
        raise EngineError(msg)
    return data


def _triples(meta_info: dict[str, Any]) -> list[Any]:
    triples = meta_info.get("output_token_logprobs")
    if triples is None:
        msg = f"{_ENGINE} sent no output_token_logprobs although return_logprob was set"
        raise EngineError(msg)
    return list(triples)


def _split(triples: list[Any]) -> tuple[list[int], list[float]]:
    try:
        return [int(t[1]) for t in triples], [float(t[0]) for t in triples]
    except (TypeError, IndexError, ValueError) as exc:
        msg = f"{_ENGINE} sent malformed output_token_logprobs: {str(triples)[:200]}"
        raise EngineError(msg) from exc


@dataclass(slots=True)
class _StreamCursor:
    """How many output tokens of a stream this client has emitted so far."""

    emitted: int = 0

    def new_triples(self, meta_info: dict[str, Any]) -> list[Any]:
        triples = _triples(meta_info)
        # Cumulative events end where deltas end: at completion_tokens. Without it, assume
        # SGLang's default cumulative events.
        total = meta_info.get("completion_tokens")
        first = total - len(triples) if isinstance(total, int) else 0
        fresh = triples[max(0, self.emitted - first) :]
        self.emitted = max(self.emitted, first + len(triples))
        return fresh


class SGLangEngine(HTTPEngineBase):
    """An SGLang server's native `/generate` API as an rltap `InferenceEngine`.

    `url` is the server root (`http://host:30000`). `timeout` is how long the server may stay
    silent (a whole non-streamed generation, or the gap between streamed events).

    Usage:
        engine = SGLangEngine("http://127.0.0.1:30000")
        response = await engine.generate(ModelRequest(input_ids=[9707, 11], max_new_tokens=16))
        await engine.close()
    """

    engine_name = _ENGINE
    request_path = _GENERATE

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float | None = 600.0,
        connect_timeout: float = 10.0,
        version: int = 0,
        logprob_convention: LogprobConvention = LogprobConvention.TEMPERATURE_SCALED,
        max_connections: int = 0,
    ) -> None:
        super().__init__(
            url,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            version=version,
            logprob_convention=logprob_convention,
            max_connections=max_connections,
        )

    async def start(self) -> None:
        """Nothing to acquire up front: the HTTP session opens on the first request."""

    def request_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        return generate_body(request, stream=stream)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Generate `request` in one non-streamed call."""
        started = time.perf_counter()
        body = self.request_body(request, stream=False)
        with self._inflight.track(request.request_id, cancel_task=False) as entry:
            try:
                async with self._client.post(_GENERATE, body) as response:
                    entry.response = response
                    payload = await response.read()
            except EngineError:
                if not entry.aborted:
                    raise
                return self.aborted_response(request, started)
        data = _decode(payload)
        meta_info = data["meta_info"]
        token_ids, logprobs = _split(_triples(meta_info))
        output_ids = data.get("output_ids")
        if output_ids is not None and list(output_ids) != token_ids:
            msg = f"{_ENGINE} output_ids disagree with output_token_logprobs"
            raise EngineError(msg)
        return ModelResponse(
            input_tokens=list(request.input_ids),
            output_tokens=token_ids,
            output_logprobs=logprobs,
            output_versions=[self._version] * len(token_ids),
            stop_reason=_finish(meta_info) or StopReason.STOP,
            logprob_convention=self.logprob_convention,
            constrained=request.constraint is not None,
            latency=time.perf_counter() - started,
        )

    def event_reader(self, request: ModelRequest) -> EventReader:
        cursor = _StreamCursor()

        def read_event(payload: bytes) -> TokenChunk | None:
            meta_info = _decode(payload)["meta_info"]
            token_ids, logprobs = _split(cursor.new_triples(meta_info))
            stop_reason = _finish(meta_info)
            if not token_ids and stop_reason is None:
                return None
            return TokenChunk(
                token_ids=token_ids,
                logprobs=logprobs,
                versions=[self._version] * len(token_ids),
                stop_reason=stop_reason,
            )

        return read_event

    async def abort(self, request_id: str) -> None:
        """Ask SGLang to abort `request_id`; its output so far comes back marked `abort`."""
        if request_id not in self._inflight:
            return
        try:
            async with self._client.post("/abort_request", {"rid": request_id}):
                pass
        except EngineError:
            # The server cannot be asked: drop the connection, which SGLang also treats as
            # an abort; the request ends as aborted, without its partial output.
            self._inflight.abort(request_id)
