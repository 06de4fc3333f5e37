"""Real streaming through a real uvicorn server, observed with a raw httpx stream.

Events leave the proxy as the engine produces tokens; a client that disconnects aborts the engine
request (the interaction is reported aborted, never exported); an engine error mid-stream becomes
the API's error event and ends the stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.engines.scripted import ScriptedEngine
from rltap.record.errors import EngineError
from rltap.record.types import ModelRequest, TokenChunk
from rltap.testing.proxy import RunningProxy, start_test_proxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]

TOKEN_DELAY = 0.03
LONG_REPLY = ("The quick brown fox jumps over the lazy dog, " * 4).strip()  # 40 tokens
SHORT_REPLY = "Done."


def long_or_short(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """The long reply when the last user message asks for it, else a short one."""
    last = messages[-1].get("content") if messages else ""
    return LONG_REPLY if isinstance(last, str) and "long" in last else SHORT_REPLY


class ObservedEngine(ScriptedEngine):
    """The scripted engine, telling the test when a stream was closed before its last token."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.closed_early = asyncio.Event()
        self.tokens_sent = 0

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        finished = False
        try:
            async for chunk in super().stream(request):
                self.tokens_sent += len(chunk.token_ids)
                yield chunk
            finished = True
        finally:
            if not finished:
                self.closed_early.set()


@dataclass
class SlowProxy:
    proxy: RunningProxy
    engine: ObservedEngine


@pytest.fixture
async def slow(tiny_model: Any, renderer: ChatRenderer) -> AsyncIterator[SlowProxy]:
    engine = ObservedEngine(
        long_or_short, tiny_model, tokenizer=renderer.tokenizer, token_delay=TOKEN_DELAY
    )
    config = ServeConfig(
        chat=ChatConfig(max_context=2048, default_max_tokens=256),
        limits=LimitsConfig(capacity=8, model_name="tiny"),
    )
    async with start_test_proxy(engine, renderer, config) as proxy:
        yield SlowProxy(proxy, engine)


def stream_body(path: str, text: str) -> dict[str, Any]:
    if path == "/v1/responses":
        return {"model": "tiny", "input": text, "stream": True}
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": text}],
        "stream": True,
    }
    if path == "/v1/messages":
        body["max_tokens"] = 256
    return body


@dataclass
class Event:
    at: float  # seconds since the request was sent
    name: str | None  # the `event:` line, if any
    data: Any  # parsed JSON, or the literal text ([DONE])


def is_content(path: str, event: Event) -> bool:
    if path == "/v1/chat/completions":
        choices = event.data.get("choices") if isinstance(event.data, dict) else None
        return bool(choices and choices[0]["delta"].get("content"))
    if path == "/v1/responses":
        return event.name == "response.output_text.delta"
    return event.name == "content_block_delta" and event.data["delta"]["type"] == "text_delta"


def interaction_id_of(path: str, events: list[Event]) -> str:
    first = events[0].data
    if path == "/v1/chat/completions":
        return str(first["id"])
    if path == "/v1/responses":
        return str(first["response"]["id"])
    return str(first["message"]["id"])


async def read_events(
    response: httpx.Response, started: float, stop: Callable[[list[Event]], bool] | None = None
) -> list[Event]:
    """The SSE events of `response` as they arrive (until `stop` says enough)."""
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events: list[Event] = []
    name: str | None = None
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            raw = line.removeprefix("data:").strip()
            data = raw if raw == "[DONE]" else json.loads(raw)
            events.append(Event(time.perf_counter() - started, name, data))
            name = None
            if stop is not None and stop(events):
                break
    return events


async def open_stream(proxy: RunningProxy, key: str, path: str, text: str) -> Any:
    return proxy.http.stream(
        "POST",
        f"{proxy.url}{path}",
        json=stream_body(path, text),
        headers={"authorization": f"Bearer {key}"},
    )


ROUTES = [
    pytest.param("/v1/chat/completions", id="chat"),
    pytest.param("/v1/responses", id="responses"),
    pytest.param("/v1/messages", id="messages"),
]


@pytest.mark.parametrize("path", ROUTES)
async def test_first_content_event_arrives_before_generation_ends(
    slow: SlowProxy, path: str
) -> None:
    proxy = slow.proxy
    _, key = await proxy.start_session()
    started = time.perf_counter()
    async with await open_stream(proxy, key, path, "a long one please") as response:
        events = await read_events(response, started)
    content = [event for event in events if is_content(path, event)]
    total = events[-1].at
    # The engine took ~40 x TOKEN_DELAY; the events came as it went, not all at the end.
    assert total >= 40 * TOKEN_DELAY * 0.8
    assert len(content) >= 20
    assert content[0].at < total / 2
    assert content[len(content) // 2].at < total * 0.8
    if path == "/v1/chat/completions":
        text = "".join(e.data["choices"][0]["delta"]["content"] for e in content)
    elif path == "/v1/responses":
        text = "".join(e.data["delta"] for e in content)
    else:
        text = "".join(e.data["delta"]["text"] for e in content)
    assert text == LONG_REPLY


@pytest.mark.parametrize("path", ROUTES)
async def test_a_client_that_disconnects_aborts_the_engine_request(
    slow: SlowProxy, path: str
) -> None:
    proxy, engine = slow.proxy, slow.engine
    session_id, key = await proxy.start_session()
    started = time.perf_counter()

    def three_content_events(events: list[Event]) -> bool:
        return sum(is_content(path, event) for event in events) >= 3

    async with await open_stream(proxy, key, path, "a long one please") as response:
        events = await read_events(response, started, stop=three_content_events)
    aborted_id = interaction_id_of(path, events)

    # The engine's stream is closed well before its 41 tokens, at most a few tokens later.
    await asyncio.wait_for(engine.closed_early.wait(), 5)
    assert engine.tokens_sent < 20

    # The session still works.
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
    reply = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "something short"}]
    )
    assert reply.choices[0].message.content == SHORT_REPLY
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = await proxy.export(session_id)
    assert [item["interaction_id"] for item in export["interactions"]] == [reply.id]
    (not_exported,) = export["not_exported"]
    assert not_exported["interaction_id"] == aborted_id
    assert not_exported["status"] == "aborted"


@pytest.mark.parametrize("path", ROUTES)
async def test_an_engine_error_mid_stream_is_the_apis_error_event(
    make_proxy: ProxyFactory, path: str
) -> None:
    proxy = await make_proxy(failures={0: EngineError}, fail_after_tokens=3)
    session_id, key = await proxy.start_session()
    started = time.perf_counter()
    async with await open_stream(proxy, key, path, "tell me something") as response:
        events = await read_events(response, started)
    assert any(is_content(path, event) for event in events), "no content before the failure"
    if path == "/v1/chat/completions":
        *_, error, done = events
        assert done.data == "[DONE]"
        assert set(error.data) == {"error"}
        assert error.data["error"]["type"] == "api_error"
        assert error.data["error"]["code"] == "engine_error"
        assert "injected failure" in error.data["error"]["message"]
    elif path == "/v1/responses":
        *_, error, failed = events
        assert error.name == "error"
        assert error.data["code"] == "engine_error"
        assert "injected failure" in error.data["message"]
        assert failed.name == "response.failed"
        assert failed.data["response"]["status"] == "failed"
        assert [event.name for event in events].count("response.completed") == 0
    else:
        error = events[-1]
        assert error.name == "error"
        assert error.data["type"] == "error"
        assert error.data["error"]["type"] == "api_error"
        assert "injected failure" in error.data["error"]["message"]
        assert [event.name for event in events].count("message_stop") == 0

    # Without streaming the same failure is a 502 in the API's envelope.
    body = {**stream_body(path, "again"), "stream": False}
    response = await proxy.session_post(key, path, body)
    assert response.status_code == 502, response.text
    if path == "/v1/messages":
        assert response.json()["error"]["type"] == "api_error"
    else:
        assert response.json()["error"]["code"] == "engine_error"

    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = await proxy.export(session_id)
    assert export["interactions"] == []
    assert [item["status"] for item in export["not_exported"]] == ["failed", "failed"]
    assert all("injected failure" in item["error"] for item in export["not_exported"])


async def test_the_openai_client_raises_on_an_error_event(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(failures={0: EngineError}, fail_after_tokens=3)
    _, key = await proxy.start_session()
    client = openai.AsyncOpenAI(
        base_url=proxy.base_url, api_key=key, http_client=proxy.http, max_retries=0
    )
    stream = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello"}], stream=True
    )
    received: list[str] = []

    async def drain() -> None:
        async for chunk in stream:
            received.extend(c.delta.content or "" for c in chunk.choices)

    with pytest.raises(openai.APIError, match="injected failure"):
        await drain()
    assert "".join(received)
