"""Reading what a client sent: its API key, the agent it names, its body within the size limit."""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import Request

from rltap.record.errors import PayloadTooLarge
from rltap.tree.links import AGENT_HEADER, agent_from_header

__all__ = ["body_over_limit", "declared_over_limit", "request_agent", "request_key"]


def request_key(request: Request) -> str | None:
    """The API key: `Authorization: Bearer <key>` (OpenAI) or `x-api-key` (Anthropic)."""
    authorization = request.headers.get("authorization")
    if authorization:
        scheme, _, bearer = authorization.partition(" ")
        if scheme.lower() == "bearer" and bearer.strip():
            return bearer.strip()
    x_api_key = request.headers.get("x-api-key")
    return x_api_key.strip() if x_api_key and x_api_key.strip() else None


def request_agent(request: Request) -> str | None:
    """The agent the client names in `X-Rltap-Agent` (None: unnamed)."""
    return agent_from_header(request.headers.get(AGENT_HEADER))


def body_over_limit(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body is over the limit of {limit} bytes")


def declared_over_limit(headers: Iterable[tuple[bytes, bytes]], limit: int) -> bool:
    """Whether the request's Content-Length already says its body is over `limit` bytes."""
    for name, value in headers:
        if name == b"content-length":
            return value.isdigit() and int(value) > limit
    return False
