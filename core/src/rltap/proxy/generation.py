"""The generation routes as one raw ASGI endpoint, served before FastAPI's middleware stack.

POST /v1/chat/completions (alias /chat/completions), /v1/responses (alias /responses) and
/v1/messages carry nearly every call an agent makes, so they skip FastAPI's routing, dependency
and middleware layers and do the same work directly on ASGI messages: the body limit (413 by
Content-Length or by counting), the session key, the JSON checks of `rltap.proxy.requests`, the
exchange itself (`rltap.exchange`), errors in the API's envelope (`rltap.proxy.errors`), and the
request and generation metrics. A streamed reply stops, and its engine request is aborted, as soon
as the client disconnects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from rltap import exchange
from rltap.errors import RltapError
from rltap.protocols.anthropic_messages import MessageCreateParams
from rltap.protocols.base import Api, Generation
from rltap.protocols.openai_chat import ChatCompletionRequest
from rltap.protocols.openai_responses import ResponsesRequest
from rltap.proxy.errors import error_reply, http_error, internal_error
from rltap.proxy.metrics import ProxyMetrics
from rltap.proxy.requests import (
    api_key,
    body_over_limit,
    declared_over_limit,
    parse_json,
    read_body,
)

if TYPE_CHECKING:
    from rltap.proxy.app import ProxyState

__all__ = ["GENERATION_ROUTES", "GenerationEndpoint", "document_generation_routes"]

GENERATION_ROUTES: dict[str, Api] = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/messages": "messages",
}
# nginx's status for a client that hung up before its reply: counted, never sent.
_CLIENT_CLOSED = 499
_JSON_TYPE = (b"content-type", b"application/json")
_SSE_HEADERS = [
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"content-type", b"text/event-stream; charset=utf-8"),
]


class GenerationEndpoint:
    """Answers a generation request of one proxy, on a path in `GENERATION_ROUTES`.

    Usage:
        endpoint = GenerationEndpoint(state)
        await endpoint(scope, receive, send)
    """

    def __init__(self, state: ProxyState) -> None:
        self._state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        path: str = scope["path"]
        status = 500
        try:
            status = await self._respond(path, scope, receive, send, started)
        finally:  # a stream is timed until its last byte
            self._state.metrics.observe_request(path, status, time.perf_counter() - started)

    async def _respond(
        self, path: str, scope: Scope, receive: Receive, send: Send, started: float
    ) -> int:
        """Send the reply, or the error that came instead of it; the status sent."""
        try:
            result = await self._reply(GENERATION_ROUTES[path], scope, receive, started)
            body = orjson.dumps(result.body) if isinstance(result, exchange.JsonReply) else b""
        except RltapError as exc:
            return await _send_error(send, path, exc)
        except ClientDisconnect:
            return _CLIENT_CLOSED
        except Exception as exc:
            return await _send_error(send, path, internal_error(path, exc))
        if isinstance(result, exchange.StreamReply):
            await _stream(result.chunks, receive, send)
        else:
            headers = [(b"content-length", str(len(body)).encode()), _JSON_TYPE]
            await _send_whole(send, 200, headers, body)
        return 200

    async def _reply(
        self, api: Api, scope: Scope, receive: Receive, started: float
    ) -> exchange.JsonReply | exchange.StreamReply:
        state = self._state
        limit = state.config.max_body_bytes
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        if declared_over_limit(headers, limit):
            raise body_over_limit(limit)
        if scope["method"] != "POST":
            raise http_error(405, "Method Not Allowed")
        record = state.store.session_for_key(_key(headers))
        body = parse_json(await read_body(receive, limit))
        canonical = exchange.parse(api, body, known=record.session.recent_messages)
        loop = asyncio.get_running_loop()
        record.call_started()

        def done(generations: list[Generation]) -> None:
            record.call_finished()
            state.store.touch(record)
            if generations:  # counted once the reply is on its way: the client need not wait
                loop.call_soon(_observe, state.metrics, api, started, generations)

        return await exchange.reply(record.session, canonical, done)


def _key(headers: list[tuple[bytes, bytes]]) -> str | None:
    authorization = x_api_key = None
    for name, value in headers:
        if name == b"authorization":
            authorization = value.decode("latin-1")
        elif name == b"x-api-key":
            x_api_key = value.decode("latin-1")
    return api_key(authorization, x_api_key)


def _observe(
    metrics: ProxyMetrics, api: Api, started: float, generations: list[Generation]
) -> None:
    metrics.observe_generation(
        api,
        time.perf_counter() - started,
        max((g.response.latency for g in generations), default=0.0),
        sum(g.prompt_tokens for g in generations),
        sum(g.completion_tokens for g in generations),
    )


async def _send_whole(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send: Send, path: str, exc: RltapError) -> int:
    reply = error_reply(path, exc)
    await _send_whole(send, reply.status, reply.headers, reply.body)
    return reply.status


async def _stream(chunks: AsyncIterator[bytes], receive: Receive, send: Send) -> None:
    """Send `chunks` as server-sent events until they end or the client disconnects.

    The ASGI server drops what is sent after a disconnect without a word, so a concurrent task
    listens for `http.disconnect`; it cancels the sending, which closes `chunks` and so aborts the
    engine request.
    """
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    sending = asyncio.ensure_future(_send_chunks(chunks, send))
    hang_up = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait((sending, hang_up), return_when=asyncio.FIRST_COMPLETED)
    finally:
        hang_up.cancel()
        if not sending.done():
            sending.cancel()
            await asyncio.wait((sending,))  # its cleanup (the engine abort) runs to the end
    if not sending.cancelled():
        sending.result()  # what went wrong while sending, if anything


async def _send_chunks(chunks: AsyncIterator[bytes], send: Send) -> None:
    try:
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        if isinstance(chunks, AsyncGenerator):
            await chunks.aclose()


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


# --- OpenAPI ---------------------------------------------------------------------------------

_BODY_MODELS: dict[Api, type[BaseModel]] = {
    "chat": ChatCompletionRequest,
    "responses": ResponsesRequest,
    "messages": MessageCreateParams,
}
_SUMMARIES: dict[Api, str] = {
    "chat": "OpenAI Chat Completions",
    "responses": "OpenAI Responses",
    "messages": "Anthropic Messages",
}


def document_generation_routes(document: dict[str, Any]) -> None:
    """Add the generation routes to an OpenAPI `document`: POST, with their JSON request bodies.

    Each body schema is its protocol's pydantic model, under the model's name in
    `components/schemas` (its nested definitions prefixed with that name).
    """
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in _BODY_MODELS.values():
        prefix = model.__name__ + "."
        schema = model.model_json_schema(ref_template=f"#/components/schemas/{prefix}{{model}}")
        for name, definition in schema.pop("$defs", {}).items():
            schemas[prefix + name] = definition
        schemas[model.__name__] = schema
    paths = document.setdefault("paths", {})
    for path, api in GENERATION_ROUTES.items():
        body_schema = {"$ref": f"#/components/schemas/{_BODY_MODELS[api].__name__}"}
        paths[path] = {
            "post": {
                "summary": _SUMMARIES[api],
                "operationId": f"{api}{path.replace('/', '_')}",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": body_schema}},
                },
                "responses": {
                    "200": {
                        "description": "The reply: one JSON body, or server-sent events with "
                        '"stream": true',
                        "content": {
                            "application/json": {"schema": {"type": "object"}},
                            "text/event-stream": {"schema": {"type": "string"}},
                        },
                    },
                    "default": {
                        "description": "An error, in the API's own error envelope",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                },
            }
        }
