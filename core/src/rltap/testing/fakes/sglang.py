"""A small fake SGLang server for testing `SGLangEngine` on a machine where SGLang cannot run.

SGLang needs a GPU (or an accelerator build) and cannot be installed on CPU-only machines, so
`SGLangEngine` is tested against this real HTTP server on 127.0.0.1 (aiohttp.web). It follows
SGLang's documented native API, not its internals:

- `POST /generate` with `input_ids`, `sampling_params` (`max_new_tokens`, `temperature`,
  `top_p`, `top_k` (-1 or >= 1), `stop_token_ids`, `stop`, `skip_special_tokens`,
  `no_stop_trim`, `sampling_seed`, and one constraint at most: `json_schema` (a JSON string),
  `regex` or `ebnf`), `return_logprob`, `stream`, `rid`;
- the reply `{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
  "completion_tokens", "output_token_logprobs": [[logprob, token_id, null], ...]}}`, finish
  reasons `{"type": "stop", "matched": id}`, `{"type": "length", "length": n}` and
  `{"type": "abort", "message": ...}`;
- streams as `data: {...}` events ending with `data: [DONE]`, cumulative by default and deltas
  when `incremental=True` (SGLang's `--incremental-streaming-output`);
- errors as `{"error": {"message": ...}}` with HTTP 400, mid-stream as a `data:` error event;
- `POST /abort_request` with `{"rid": ...}`, and an abort when the client disconnects.

The "model" is a fixed function: output token i of a prompt is `(sum(prompt) * 31 + 7 * i) %
vocab_size` with logprob `-0.01 * (i + 1) - 0.5`, so tests know the expected tokens up front.

Usage:
    async with FakeSGLang(token_delay=0.01) as server:
        engine = SGLangEngine(server.url)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from rltap.testing.fakes._serving import ServedApp

__all__ = ["FakeSGLang", "expected_output"]

VOCAB_SIZE = 151_936


def expected_output(input_ids: list[int], n: int) -> tuple[list[int], list[float]]:
    """The first `n` tokens and logprobs the fake generates for `input_ids`."""
    base = sum(input_ids) * 31
    tokens = [(base + 7 * i) % VOCAB_SIZE for i in range(n)]
    return tokens, [-0.01 * (i + 1) - 0.5 for i in range(n)]


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


@dataclass
class _Generation:
    rid: str
    input_ids: list[int]
    params: dict[str, Any]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None

    def meta_info(self, start: int = 0) -> dict[str, Any]:
        return {
            "id": self.rid,
            "finish_reason": self.finish_reason,
            "prompt_tokens": len(self.input_ids),
            "completion_tokens": len(self.tokens),
            "weight_version": "default",
            "output_token_logprobs": [
                [lp, tok, None]
                for lp, tok in zip(self.logprobs[start:], self.tokens[start:], strict=True)
            ],
        }


@dataclass
class FakeSGLang(ServedApp):
    """The fake server. `await start()` binds a free port; `url` is its root.

    `incremental` switches streams to deltas; `token_delay` slows every token (seconds);
    `context_length` bounds prompt + output like SGLang's `--context-length`.
    """

    incremental: bool = False
    token_delay: float = 0.0
    context_length: int = 1024
    requests: list[dict[str, Any]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    _running: dict[str, _Generation] = field(default_factory=dict)
    _abort_requested: set[str] = field(default_factory=set)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/abort_request", self._abort_request)
        app.router.add_get("/health", self._health)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _abort_request(self, request: web.Request) -> web.Response:
        body = await request.json()
        self._abort_requested.add(str(body.get("rid")))
        return web.Response(text="")

    def _validate(self, body: dict[str, Any]) -> str | None:
        input_ids = body.get("input_ids")
        if not isinstance(input_ids, list) or not input_ids:
            return "Either text, input_ids or input_embeds should be provided."
        params = body.get("sampling_params", {})
        top_k = params.get("top_k", -1)
        if top_k == 0 or top_k < -1:
            return f"top_k must be -1 (disable), or at least 1, got {top_k}."
        constraints = [k for k in ("json_schema", "regex", "ebnf") if params.get(k) is not None]
        if len(constraints) > 1:
            return "Only one of regex, json_schema, or ebnf can be set."
        if "json_schema" in constraints and not isinstance(params["json_schema"], str):
            return "json_schema must be a JSON string."
        max_new = params.get("max_new_tokens", 128)
        if len(input_ids) + max_new > self.context_length:
            return (
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.context_length} tokens. You requested a total of "
                f"{len(input_ids) + max_new} tokens: {len(input_ids)} tokens from the input "
                f"messages and {max_new} tokens for the completion."
            )
        return None

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if (problem := self._validate(body)) is not None:
            return _error(problem)
        rid = str(body.get("rid") or id(body))
        generation = _Generation(rid, body["input_ids"], body.get("sampling_params", {}))
        self._running[rid] = generation
        try:
            if body.get("stream"):
                return await self._stream(request, generation)
            async for _ in self._steps(generation):
                pass
            return web.json_response(self._output(generation))
        finally:
            del self._running[rid]

    def _output(self, generation: _Generation, start: int = 0) -> dict[str, Any]:
        return {
            "text": "",
            "output_ids": generation.tokens[start:],
            "meta_info": generation.meta_info(start),
        }

    async def _steps(self, generation: _Generation) -> AsyncIterator[None]:
        """Generate token by token, yielding after each one; sets the finish reason."""
        max_new = int(generation.params.get("max_new_tokens", 128))
        stop_ids = set(generation.params.get("stop_token_ids") or [])
        tokens, logprobs = expected_output(generation.input_ids, max_new)
        for token, logprob in zip(tokens, logprobs, strict=True):
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            if generation.rid in self._abort_requested:
                generation.finish_reason = {"type": "abort", "message": "Abort in waiting queue"}
                self.aborted.append(generation.rid)
                return
            generation.tokens.append(token)
            generation.logprobs.append(logprob)
            if token in stop_ids:
                generation.finish_reason = {"type": "stop", "matched": token}
                return
            yield
        generation.finish_reason = {"type": "length", "length": max_new}

    async def _stream(self, request: web.Request, generation: _Generation) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        sent = 0
        try:
            async for _ in self._steps(generation):
                await self._send(response, generation, sent)
                sent = len(generation.tokens)
            await self._send(response, generation, sent)
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            # The client went away: SGLang aborts the request then.
            self.aborted.append(generation.rid)
            raise
        return response

    async def _send(self, response: web.StreamResponse, generation: _Generation, sent: int) -> None:
        output = self._output(generation, sent if self.incremental else 0)
        await response.write(b"data: " + orjson.dumps(output) + b"\n\n")
