"""The official clients pointed at a test proxy with a session key, and a whole SSE body read back
(imported by the tests here)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import openai

from rltap.testing.proxy import RunningProxy


def openai_client(proxy: RunningProxy, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)


def anthropic_client(
    proxy: RunningProxy, key: str, http: httpx2.AsyncClient
) -> anthropic.AsyncAnthropic:
    """`http` is an httpx2 client (the anthropic SDK's HTTP library), the `http2` fixture's."""
    return anthropic.AsyncAnthropic(base_url=proxy.url, api_key=key, http_client=http)


def sse_data(body: str) -> list[Any]:
    """The `data:` payloads of a whole SSE body, decoded (`[DONE]` kept as it is)."""
    lines = [
        line.removeprefix("data:").strip() for line in body.splitlines() if line.startswith("data:")
    ]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]
