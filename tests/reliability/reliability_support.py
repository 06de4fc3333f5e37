"""What the reliability tests share: engines that answer at once, on hold or slowly, and checks.

`HeldEngine` is `rltap.testing.fakes.InstantEngine` (it answers at once) except for calls whose
last message holds `HOLD` (they wait until the test calls `release()`) or `TRICKLE` (they stream
`trickle_tokens` tokens, one every `token_delay` seconds).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.record.types import ModelRequest, ModelResponse, StopReason, TokenChunk
from rltap.testing.fakes import InstantEngine
from rltap.testing.proxy import RunningProxy

ROOT = Path(__file__).resolve().parents[2]
SOAK_SCRIPT = ROOT / "bench" / "soak.py"

REPLY = "Hello from the instant engine."
HOLD = "[hold]"
TRICKLE = "[trickle]"

ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
}


MakeProxy = Callable[..., Awaitable[RunningProxy]]


def _last_text(request: ModelRequest) -> str:
    if not request.messages:
        return ""
    content = request.messages[-1].get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


class HeldEngine(InstantEngine):
    """The instant engine, with calls the test holds (`HOLD`) or slows down (`TRICKLE`)."""

    def __init__(
        self, reply_ids: list[int], end_id: int, *, token_delay: float = 0.02, trickle: int = 200
    ) -> None:
        super().__init__(reply_ids, end_id)
        self.token_delay = token_delay
        self.trickle_tokens = trickle
        self.held = 0  # calls waiting for release() now
        self.trickled = 0  # tokens sent by trickling streams
        self.streams_closed_early = 0
        self._release: asyncio.Event | None = None

    def _gate(self) -> asyncio.Event:
        if self._release is None:
            self._release = asyncio.Event()
        return self._release

    def release(self) -> None:
        """Let every held call (and every later one) answer."""
        self._gate().set()

    async def _hold(self, request: ModelRequest) -> None:
        if HOLD in _last_text(request):
            self.held += 1
            try:
                await self._gate().wait()
            finally:
                self.held -= 1

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await self._hold(request)
        response: ModelResponse = await super().generate(request)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[TokenChunk]:
        if TRICKLE not in _last_text(request):
            async for chunk in super().stream(request):
                yield chunk
            return
        finished = False
        try:
            for position in range(self.trickle_tokens):
                await asyncio.sleep(self.token_delay)  # the engine's time for one token
                self.trickled += 1
                last = position == self.trickle_tokens - 1
                yield TokenChunk(
                    token_ids=[self._ids[position % (len(self._ids) - 1)]],
                    logprobs=[-0.5],
                    versions=[self.version],
                    stop_reason=StopReason.LENGTH if last else None,
                )
            finished = True
        finally:
            if not finished:
                self.streams_closed_early += 1


async def poll(check: Callable[[], Awaitable[bool] | bool], within: float, what: str) -> float:
    """Await `check` until it is true; the seconds it took (the test fails after `within`)."""
    started = time.monotonic()
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return time.monotonic() - started
        if time.monotonic() - started > within:
            pytest.fail(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.01)


class HTTPResponse(Protocol):
    """What httpx's and requests' responses both have."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Any: ...
    @property
    def text(self) -> str: ...
    def json(self) -> Any: ...


def assert_error(path: str, response: HTTPResponse, status: int) -> dict[str, Any]:
    """`response` is `status` in the route's error envelope; returns the inner error."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    return assert_envelope(path, response.json(), status)


def assert_envelope(path: str, body: Any, status: int) -> dict[str, Any]:
    """`body` is the route's error envelope (Anthropic's on /v1/messages, else OpenAI's)."""
    if path.startswith("/v1/messages"):
        assert body["type"] == "error", body
        # A thread error also carries its code for the SDK's thread recovery.
        assert set(body["error"]) - {"details"} == {"type", "message"}, body
        if "details" in body["error"]:
            assert set(body["error"]["details"]) == {"error_code"}, body
        assert body["error"]["type"] == ANTHROPIC_TYPES.get(status, body["error"]["type"])
    else:
        assert set(body) == {"error"}, body
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
    error: dict[str, Any] = body["error"]
    assert isinstance(error["message"], str)
    assert error["message"]
    return error


def generation_body(path: str, text: str, **extra: Any) -> dict[str, Any]:
    """A one-message request for the generation route `path`."""
    if path.endswith("/responses"):
        return {"model": "instant", "input": text, "max_output_tokens": 16, **extra}
    messages = [{"role": "user", "content": text}]
    return {"model": "instant", "messages": messages, "max_tokens": 16, **extra}


GENERATION_PATHS = ("/v1/chat/completions", "/v1/responses", "/v1/messages")


def proxy_config(limits: LimitsConfig | None = None) -> ServeConfig:
    """The proxies of this suite: 4096 tokens of context, room for 256 sessions."""
    return ServeConfig(
        chat=ChatConfig(max_context=4096, default_max_tokens=64),
        limits=limits or LimitsConfig(capacity=256, model_name="instant"),
    )
