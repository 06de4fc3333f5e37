"""Reading what a client sent: its key, its body (within the size limit) and that body as JSON.

The FastAPI routes read a `Request`; the generation endpoint reads raw ASGI messages. Both go
through the same checks here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
from fastapi import Request
from starlette.requests import ClientDisconnect
from starlette.types import Receive

from rltap.errors import InvalidRequest, PayloadTooLarge

__all__ = [
    "MAX_DEPTH",
    "api_key",
    "body_over_limit",
    "declared_over_limit",
    "parse_json",
    "read_body",
    "read_json",
    "request_key",
]

# Deeper bodies are refused: the recursive steps after parsing (canonical forms, templates,
# re-serialising for export, whose orjson stops at 254 levels) must never meet them.
MAX_DEPTH = 128


def api_key(authorization: str | None, x_api_key: str | None) -> str | None:
    """The API key: `Authorization: Bearer <key>` (OpenAI) or `x-api-key` (Anthropic)."""
    if authorization:
        scheme, _, bearer = authorization.partition(" ")
        if scheme.lower() == "bearer" and bearer.strip():
            return bearer.strip()
    return x_api_key.strip() if x_api_key and x_api_key.strip() else None


def request_key(request: Request) -> str | None:
    """The API key of a FastAPI request (see `api_key`)."""
    return api_key(request.headers.get("authorization"), request.headers.get("x-api-key"))


def body_over_limit(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body is over the limit of {limit} bytes")


def declared_over_limit(headers: Iterable[tuple[bytes, bytes]], limit: int) -> bool:
    """Whether the request's Content-Length already says its body is over `limit` bytes."""
    for name, value in headers:
        if name == b"content-length":
            return value.isdigit() and int(value) > limit
    return False


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole body of a raw ASGI request; `PayloadTooLarge` as soon as it passes `limit`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise body_over_limit(limit)
        if not message.get("more_body", False):
            if not chunks:
                return chunk
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


async def read_json(request: Request, *, allow_empty: bool = False) -> dict[str, Any]:
    """The body of a FastAPI request as a JSON object (see `parse_json`)."""
    return parse_json(await request.body(), allow_empty=allow_empty)


def parse_json(raw: bytes, *, allow_empty: bool = False) -> dict[str, Any]:
    """`raw` as a JSON object; `InvalidRequest` for anything else (never a 500)."""
    if not raw.strip():
        if allow_empty:
            return {}
        msg = "the request body is empty; send a JSON object"
        raise InvalidRequest(msg)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        msg = f"the request body is not valid JSON: {exc}"
        raise InvalidRequest(msg) from None
    if not isinstance(body, dict):
        msg = f"the request body must be a JSON object, not {type(body).__name__}"
        raise InvalidRequest(msg)
    # Counting brackets is cheap; only a body with that many can nest that deep.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _nests_deeper(body, MAX_DEPTH):
        msg = f"the request body nests arrays and objects more than {MAX_DEPTH} levels deep"
        raise InvalidRequest(msg)
    return body


def _nests_deeper(value: Any, limit: int) -> bool:
    level: list[Any] = [value]
    for _ in range(limit):  # one level of containers at a time: each is visited once
        deeper: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            deeper.extend(c for c in children if type(c) is dict or type(c) is list)
        if not deeper:
            return False
        level = deeper
    return True
