"""Reading what a client sent: its key and its JSON body."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request

from rltap.errors import InvalidRequest

__all__ = ["read_json", "request_key"]


def request_key(request: Request) -> str | None:
    """The API key: `Authorization: Bearer <key>` (OpenAI) or `x-api-key` (Anthropic)."""
    authorization = request.headers.get("authorization")
    if authorization:
        scheme, _, bearer = authorization.partition(" ")
        if scheme.lower() == "bearer" and bearer.strip():
            return bearer.strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


async def read_json(request: Request, *, allow_empty: bool = False) -> dict[str, Any]:
    """The body as a JSON object; `InvalidRequest` for anything else (never a 500)."""
    raw = await request.body()
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
    return body
