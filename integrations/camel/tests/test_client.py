"""`ProxyModel`: CAMEL's calls go to the connection's URL, with its key, through its clients."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from camel.agents import ChatAgent

from rltap.adapter import Connection
from rltap_camel import ByteTokenCounter, ProxyModel

BASE_URL = "http://proxy.test/v1"
KEY = "session-key-123"


def completion(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hello back"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        },
    )


class Recorder:
    """A MockTransport handler that answers every call and keeps the requests."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return completion(request)

    def check(self, model_name: str = "rltap") -> dict[str, Any]:
        (request,) = self.requests
        assert str(request.url) == f"{BASE_URL}/chat/completions"
        assert request.headers["authorization"] == f"Bearer {KEY}"
        body: dict[str, Any] = json.loads(request.content)
        assert body["model"] == model_name
        return body


async def test_async_calls_use_the_injected_async_client() -> None:
    recorder = Recorder()
    http = httpx.AsyncClient(transport=httpx.MockTransport(recorder))
    model = ProxyModel(Connection(BASE_URL, KEY, http), model="policy", config={"temperature": 0.5})
    response = await ChatAgent("You are terse.", model=model).astep("hello")
    assert response.msgs[0].content == "hello back"
    body = recorder.check("policy")
    assert body["temperature"] == 0.5
    assert body["messages"][-1] == {"role": "user", "content": "hello"}
    await model.aclose()
    assert not http.is_closed  # the workflow's client stays the workflow's
    await http.aclose()


def test_sync_calls_use_an_injected_sync_client() -> None:
    recorder = Recorder()
    with httpx.Client(transport=httpx.MockTransport(recorder)) as http:
        model = ProxyModel(Connection(BASE_URL, KEY, http))
        assert ChatAgent("You are terse.", model=model).step("hi").msgs[0].content == "hello back"
        recorder.check()


async def test_with_config_shares_the_clients_and_switches_streaming() -> None:
    recorder = Recorder()
    http = httpx.AsyncClient(transport=httpx.MockTransport(recorder))
    model = ProxyModel(Connection(BASE_URL, KEY, http), stream=True, config={"temperature": 0.5})
    assert model.model_config_dict == {
        "temperature": 0.5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    plain = model.with_config(stream=False, max_tokens=64)
    assert plain.model_config_dict == {"temperature": 0.5, "max_tokens": 64, "stream": False}
    await ChatAgent("You are terse.", model=plain).astep("hello")
    assert recorder.check()["max_tokens"] == 64
    await plain.aclose()
    await model.aclose()
    await http.aclose()


@pytest.mark.parametrize("window", [pytest.param(4096, id="small"), pytest.param(10**6, id="big")])
def test_context_window_is_what_camel_trims_to(window: int) -> None:
    model = ProxyModel(Connection(BASE_URL, KEY), context_window=window)
    assert isinstance(model.token_counter, ByteTokenCounter)  # never a tiktoken download
    assert ChatAgent("You are terse.", model=model).model_backend.token_limit == window
