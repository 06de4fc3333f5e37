"""The generation routes, through a real uvicorn server: served as plain routes of the app, they
get what every route gets (body limit, wrong methods, error envelopes, request metrics, OpenAPI).

The error matrix and the disconnect abort of streams are in test_errors.py and test_streaming.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.engines.scripted import ScriptedEngine
from rltap.record.types import ModelRequest, TokenChunk
from rltap.testing.proxy import RunningProxy, start_test_proxy

pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_BODY_BYTES = 20_000
TOKEN_DELAY = 0.04
SLOW_REPLY = "one two three four five six seven eight nine ten"
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
    "/chat/completions": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "tiny", "input": "hi"},
    "/responses": {"model": "tiny", "input": "hi"},
    "/v1/messages": {
        "model": "tiny",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    },
}
PATHS = [pytest.param(path, id=path) for path in BODIES]


def script(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    last = str(messages[-1].get("content")) if messages else ""
    return SLOW_REPLY if "slowly" in last else "Fine."


class ExplodingEngine(ScriptedEngine):
    """The scripted engine, with a bug (not an `RltapError`) when asked to explode."""

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        if any("explode" in str(m.get("content")) for m in request.messages or []):
            msg = "the engine broke"
            raise RuntimeError(msg)
        async for chunk in super().stream(request):
            yield chunk


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxy(tiny_model: Any, renderer: ChatRenderer) -> AsyncIterator[RunningProxy]:
    engine = ExplodingEngine(script, tiny_model, tokenizer=renderer.tokenizer)
    config = ServeConfig(
        chat=ChatConfig(max_context=2048, default_max_tokens=64),
        limits=LimitsConfig(capacity=256, model_name="tiny", max_body_bytes=MAX_BODY_BYTES),
    )
    async with start_test_proxy(engine, renderer, config) as running:
        yield running


def with_text(path: str, text: str, **fields: Any) -> dict[str, Any]:
    if "responses" in path:
        return {**BODIES[path], "input": text, **fields}
    return {**BODIES[path], "messages": [{"role": "user", "content": text}], **fields}


async def metrics(proxy: RunningProxy) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    page = await proxy.http.get(f"{proxy.url}/metrics")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(page.text)
        for sample in family.samples
    }


def requests_counted(values: Mapping[Any, float], path: str, status: int) -> float:
    labels = (("route", path), ("status", str(status)))
    return values.get(("rltap_requests_total", labels), 0.0)


def assert_envelope(path: str, response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    body: dict[str, Any] = response.json()
    if path == "/v1/messages":
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
    else:
        assert set(body) == {"error"}
        assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
async def test_a_wrong_method_is_405_in_the_envelope(
    proxy: RunningProxy, path: str, method: str
) -> None:
    before = requests_counted(await metrics(proxy), path, 405)
    _, key = await proxy.start_session()
    headers = {"authorization": f"Bearer {key}"}
    response = await proxy.http.request(method, f"{proxy.url}{path}", headers=headers)
    error = assert_envelope(path, response, 405)
    assert error["message"] == "Method Not Allowed"
    assert requests_counted(await metrics(proxy), path, 405) == before + 1


@pytest.mark.parametrize("path", PATHS)
async def test_a_declared_length_over_the_limit_is_413_before_anything_else(
    proxy: RunningProxy, path: str
) -> None:
    # No key and a body that is not even JSON: the declared length alone decides.
    raw = b"x" * (MAX_BODY_BYTES + 1)
    response = await proxy.http.post(f"{proxy.url}{path}", content=raw)
    error = assert_envelope(path, response, 413)
    assert str(MAX_BODY_BYTES) in error["message"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("size", [MAX_BODY_BYTES, MAX_BODY_BYTES + 1])
async def test_a_chunked_body_is_counted_against_the_limit(
    proxy: RunningProxy, path: str, size: int
) -> None:
    _, key = await proxy.start_session()
    # The padding is a field the APIs ignore, so the body is long but its prompt short.
    unpadded = len(httpx.Request("POST", "/", json={**BODIES[path], "padding": ""}).content)
    raw = httpx.Request("POST", "/", json={**BODIES[path], "padding": "y" * (size - unpadded)})
    raw = raw.content
    assert len(raw) == size

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(raw), 4096):
            yield raw[start : start + 4096]

    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    response = await proxy.http.post(f"{proxy.url}{path}", content=pieces(), headers=headers)
    assert "content-length" not in response.request.headers
    if size > MAX_BODY_BYTES:
        assert_envelope(path, response, 413)
    else:
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("path", PATHS)
async def test_the_key_is_read_from_bearer_or_x_api_key(proxy: RunningProxy, path: str) -> None:
    _, key = await proxy.start_session()
    for headers in ({"authorization": f"bearer  {key}"}, {"x-api-key": key}):
        response = await proxy.http.post(f"{proxy.url}{path}", json=BODIES[path], headers=headers)
        assert response.status_code == 200, (headers, response.text)
    response = await proxy.http.post(
        f"{proxy.url}{path}", json=BODIES[path], headers={"authorization": f"Basic {key}"}
    )
    assert_envelope(path, response, 401)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_an_unexpected_error_is_a_logged_500_in_the_envelope(
    proxy: RunningProxy, path: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    _, key = await proxy.start_session()
    body = with_text(path, "please explode", stream=stream)
    with caplog.at_level(logging.ERROR):
        if stream:
            # The stream had begun: it is cut short (as before the endpoint), never completed.
            with pytest.raises(httpx.RemoteProtocolError):
                await proxy.session_post(key, path, body)
            (record,) = [r for r in caplog.records if r.name == "uvicorn.error"]
        else:
            response = await proxy.session_post(key, path, body)
            error = assert_envelope(path, response, 500)
            assert error["message"] == "internal error: RuntimeError"
            assert "the engine broke" not in response.text  # no traceback or detail leaks
            (record,) = [r for r in caplog.records if r.name == "rltap.proxy"]
            assert record.getMessage() == f"unexpected error on {path}"
    assert record.exc_info is not None
    assert "the engine broke" in str(record.exc_info[1])
    # The session goes on.
    assert (await proxy.session_post(key, path, BODIES[path])).status_code == 200


@pytest.mark.parametrize("path", PATHS)
async def test_replies_carry_their_content_type_and_stream_headers(
    proxy: RunningProxy, path: str
) -> None:
    _, key = await proxy.start_session()
    response = await proxy.session_post(key, path, BODIES[path])
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    streamed = await proxy.session_post(key, path, {**BODIES[path], "stream": True})
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert streamed.headers["cache-control"] == "no-cache"
    assert streamed.headers["x-accel-buffering"] == "no"
    assert streamed.headers["transfer-encoding"] == "chunked"
    assert streamed.text.startswith(("data: ", "event: "))


async def test_requests_and_generations_are_counted_streams_until_their_last_byte(
    renderer: ChatRenderer, tiny_model: Any
) -> None:
    engine = ScriptedEngine(
        script, tiny_model, tokenizer=renderer.tokenizer, token_delay=TOKEN_DELAY
    )
    config = ServeConfig(limits=LimitsConfig(model_name="tiny", max_body_bytes=10_000))
    async with start_test_proxy(engine, renderer, config) as slow:
        _, key = await slow.start_session()
        for path in BODIES:
            assert (await slow.session_post(key, path, BODIES[path])).status_code == 200
        body = with_text("/v1/messages", "go slowly", stream=True)
        streamed = await slow.session_post(key, "/v1/messages", body)
        assert "ten" in streamed.text
        statuses = {
            400: await slow.session_post(key, "/v1/responses", {"input": 5}),
            401: await slow.http.post(f"{slow.url}/v1/chat/completions", json={}),
            405: await slow.http.get(f"{slow.url}/v1/messages"),
            413: await slow.http.post(f"{slow.url}/responses", content=b"x" * 10_001),
        }
        assert {status: r.status_code for status, r in statuses.items()} == {
            status: status for status in statuses
        }
        values = await metrics(slow)

    for path in BODIES:
        assert requests_counted(values, path, 200) == (2 if path == "/v1/messages" else 1)
    assert requests_counted(values, "/v1/responses", 400) == 1
    assert requests_counted(values, "/v1/chat/completions", 401) == 1
    assert requests_counted(values, "/v1/messages", 405) == 1
    assert requests_counted(values, "/responses", 413) == 1
    statuses_counted = {
        dict(labels)["status"] for name, labels in values if name == "rltap_requests_total"
    }
    assert not [status for status in statuses_counted if status.startswith("5")]
    overhead = {
        api: values[("rltap_proxy_overhead_seconds_count", (("route", api),))]
        for api in ("chat", "responses", "messages")
    }
    assert overhead == {"chat": 2, "responses": 2, "messages": 2}
    # Ten tokens, 40 ms apart: the stream's request time covers them all.
    seconds = values[("rltap_request_seconds_sum", (("route", "/v1/messages"),))]
    assert seconds >= 10 * TOKEN_DELAY * 0.9


async def test_a_client_gone_before_its_body_ends_gets_nothing_and_no_5xx(
    proxy: RunningProxy,
) -> None:
    _, key = await proxy.start_session()
    before = await metrics(proxy)
    host, port = proxy.url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\n"
        f"host: {host}\r\nauthorization: Bearer {key}\r\n"
        "content-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    )
    writer.write(head.encode() + b'{"model": "tiny", "mess')
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.close()
    await writer.wait_closed()

    for _ in range(100):  # the server sees the hang-up a moment later
        values = await metrics(proxy)
        if requests_counted(values, "/v1/chat/completions", 499):
            break
        await asyncio.sleep(0.02)
    assert requests_counted(values, "/v1/chat/completions", 499) == 1
    path = "/v1/chat/completions"
    assert requests_counted(values, path, 500) == requests_counted(before, path, 500)
    response = await proxy.session_post(key, "/v1/chat/completions", BODIES["/v1/chat/completions"])
    assert response.status_code == 200, response.text


async def test_other_routes_still_go_through_fastapi(proxy: RunningProxy) -> None:
    assert (await proxy.http.get(f"{proxy.url}/health")).status_code == 200
    response = await proxy.http.post(f"{proxy.url}/v1/chat/completions/extra")
    assert_envelope("/v1/chat/completions/extra", response, 404)
    response = await proxy.http.post(f"{proxy.url}/rl/set_reward", content=b"x" * 20_001)
    assert_envelope("/rl/set_reward", response, 413)


async def test_parameterised_routes_are_counted_by_their_template(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    headers = {"authorization": f"Bearer {key}"}
    paths = ["/v1/responses/resp_missing1", "/v1/responses/resp_missing2"]
    paths += ["/v1/conversations/conv_x/items/msg_y", "/no/such/route/abc"]
    before = await metrics(proxy)
    for path in paths:
        assert (await proxy.http.get(f"{proxy.url}{path}", headers=headers)).status_code == 404
    values = await metrics(proxy)

    def counted(route: str) -> float:
        return requests_counted(values, route, 404) - requests_counted(before, route, 404)

    assert counted("/v1/responses/{response_id}") == 2
    assert counted("/v1/conversations/{conversation_id}/items/{item_id}") == 1
    assert counted("other") == 1
    routes = {dict(labels).get("route") for _, labels in values}
    assert not [route for route in routes if route and "missing" in route]


async def test_openapi_lists_the_generation_routes_with_their_request_bodies(
    proxy: RunningProxy,
) -> None:
    document = (await proxy.http.get(f"{proxy.url}/openapi.json")).json()
    schemas = document["components"]["schemas"]
    expected = {
        "/v1/chat/completions": "ChatCompletionRequest",
        "/chat/completions": "ChatCompletionRequest",
        "/v1/responses": "ResponsesRequest",
        "/responses": "ResponsesRequest",
        "/v1/messages": "MessageCreateParams",
    }
    for path, model in expected.items():
        operation = document["paths"][path]["post"]
        assert set(document["paths"][path]) == {"post"}
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}
        assert set(operation["responses"]["200"]["content"]) == {
            "application/json",
            "text/event-stream",
        }
    assert "messages" in schemas["ChatCompletionRequest"]["properties"]
    assert "input" in schemas["ResponsesRequest"]["properties"]
    assert "max_tokens" in schemas["MessageCreateParams"]["properties"]
    assert all(ref.removeprefix("#/components/schemas/") in schemas for ref in refs(document))
    assert "/health" in document["paths"]


def refs(value: Any) -> list[str]:
    """Every `$ref` in a JSON document."""
    if isinstance(value, dict):
        found = [value["$ref"]] if isinstance(value.get("$ref"), str) else []
        return found + [ref for item in value.values() for ref in refs(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in refs(item)]
    return []
