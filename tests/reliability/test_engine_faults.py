"""Engine faults through the proxy: rltap's real `VLLMEngine` against a server that misbehaves.

Each fault gets the right answer, in the API's format, without a hang, and loses nothing else:
the session goes on, other sessions are not held up, the failed call is reported as not exported.

Covered elsewhere, not repeated here: the engine-level mapping of each failure to an error
(tests/engines/test_vllm_engine.py), the error event's wire format after a scripted failure and a
client disconnect with the scripted engine (tests/proxy/test_streaming.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from reliability_support import (
    GENERATION_PATHS,
    REPLY,
    MakeProxy,
    assert_error,
    generation_body,
    poll,
)

from rltap.chat.renderer import ChatRenderer
from rltap.engines.vllm import VLLMEngine
from rltap.testing.fakes import Fault, MisbehavingVLLM
from rltap.testing.proxy import RunningProxy

ENGINE_TIMEOUT = 1.0  # seconds the engine may stay silent
DEADLINE = 30.0  # no request here may take longer: a hang fails the test
PATHS = [pytest.param(path, id=path.rsplit("/", 1)[-1]) for path in GENERATION_PATHS]


@dataclass
class Rig:
    proxy: RunningProxy
    server: MisbehavingVLLM


def with_max_tokens(path: str, text: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    field = "max_output_tokens" if path.endswith("/responses") else "max_tokens"
    return generation_body(path, text, **{field: max_tokens}, **extra)


async def make_rig(
    make_proxy: MakeProxy, renderer: ChatRenderer, engine_timeout: float
) -> AsyncIterator[Rig]:
    reply_ids = renderer.tokenizer.encode(REPLY, add_special_tokens=False)
    async with MisbehavingVLLM([*reply_ids, renderer.end_of_turn_ids[-1]]) as server:
        engine = VLLMEngine(server.url, model="fake", timeout=engine_timeout)
        yield Rig(await make_proxy(engine), server)


@pytest.fixture
async def rig(make_proxy: MakeProxy, renderer: ChatRenderer) -> AsyncIterator[Rig]:
    async for made in make_rig(make_proxy, renderer, ENGINE_TIMEOUT):
        yield made


@pytest.fixture
async def patient_rig(make_proxy: MakeProxy, renderer: ChatRenderer) -> AsyncIterator[Rig]:
    """An engine that waits as long as the test does (a silent call ends when released)."""
    async for made in make_rig(make_proxy, renderer, 120.0):
        yield made


async def ok_call(proxy: RunningProxy, key: str, path: str, text: str) -> str:
    response = await proxy.session_post(key, path, generation_body(path, text))
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def end_and_export(proxy: RunningProxy, key: str, session_id: str) -> dict[str, Any]:
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    return await proxy.export(session_id)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("fault", "status"),
    [
        pytest.param(Fault.STATUS_500, 502, id="engine-500"),
        pytest.param(Fault.STATUS_503, 503, id="engine-503"),
        pytest.param(Fault.SILENT, 504, id="engine-times-out"),
        pytest.param(Fault.DROP, 502, id="engine-drops-the-connection"),
    ],
)
async def test_an_engine_fault_is_the_apis_error_and_the_session_goes_on(
    rig: Rig, path: str, fault: Fault, status: int
) -> None:
    proxy = rig.proxy
    session_id, key = await proxy.start_session()
    async with asyncio.timeout(DEADLINE):
        first = await ok_call(proxy, key, path, "first")
        failed = await proxy.session_post(key, path, with_max_tokens(path, "second", fault))
        third = await ok_call(proxy, key, path, "third")
        export = await end_and_export(proxy, key, session_id)

    error = assert_error(path, failed, status)
    assert "vLLM" in error["message"]
    assert [item["interaction_id"] for item in export["interactions"]] == [first, third]
    (lost,) = export["not_exported"]
    assert lost["status"] == "failed"
    assert "vLLM" in lost["error"]


@dataclass
class Event:
    name: str | None
    data: Any


async def read_sse(proxy: RunningProxy, key: str, path: str, body: dict[str, Any]) -> list[Event]:
    events: list[Event] = []
    headers = {"authorization": f"Bearer {key}"}
    async with proxy.http.stream("POST", f"{proxy.url}{path}", json=body, headers=headers) as r:
        assert r.status_code == 200
        name: str | None = None
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                name = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                raw = line.removeprefix("data:").strip()
                events.append(Event(name, raw if raw == "[DONE]" else json.loads(raw)))
                name = None
    return events


def stream_error(path: str, events: list[Event]) -> str:
    """The message of the stream's error event, checking that the stream ended as the API ends
    a failed one."""
    if path == "/v1/chat/completions":
        *_, error, done = events
        assert done.data == "[DONE]"
        return str(error.data["error"]["message"])
    if path == "/v1/responses":
        *_, error, failed = events
        assert error.name == "error"
        assert failed.name == "response.failed"
        return str(error.data["message"])
    *_, error = events
    assert error.name == "error"
    assert "message_stop" not in [event.name for event in events]
    return str(error.data["error"]["message"])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(Fault.STATUS_500, id="engine-500"),
        pytest.param(Fault.SILENT, id="engine-times-out"),
        pytest.param(Fault.DROP, id="engine-drops-mid-stream"),
    ],
)
async def test_an_engine_fault_while_streaming_ends_the_stream_with_an_error_event(
    rig: Rig, path: str, fault: Fault
) -> None:
    proxy = rig.proxy
    session_id, key = await proxy.start_session()
    async with asyncio.timeout(DEADLINE):
        body = with_max_tokens(path, "stream it", fault, stream=True)
        events = await read_sse(proxy, key, path, body)
        after = await ok_call(proxy, key, path, "after the fault")
        export = await end_and_export(proxy, key, session_id)

    assert "vLLM" in stream_error(path, events)
    assert [item["interaction_id"] for item in export["interactions"]] == [after]
    assert [item["status"] for item in export["not_exported"]] == ["failed"]


async def test_a_hung_engine_call_holds_up_no_other_session(patient_rig: Rig) -> None:
    proxy, server = patient_rig.proxy, patient_rig.server
    hung_id, hung_key = await proxy.start_session()
    other_id, other_key = await proxy.start_session()
    path = "/v1/chat/completions"
    hung = asyncio.create_task(
        proxy.session_post(hung_key, path, with_max_tokens(path, "hang", Fault.SILENT))
    )
    await poll(lambda: Fault.SILENT in server.received, 10, "the engine to receive the call")

    async with asyncio.timeout(DEADLINE):
        ids = [await ok_call(proxy, other_key, path, f"turn {turn}") for turn in range(3)]
        export = await end_and_export(proxy, other_key, other_id)
    assert [item["interaction_id"] for item in export["interactions"]] == ids
    assert not hung.done()

    server.release()  # the engine closes the connection without an answer
    response = await asyncio.wait_for(hung, DEADLINE)
    assert_error(path, response, 502)
    export = await end_and_export(proxy, hung_key, hung_id)
    assert export["interactions"] == []
    assert [item["status"] for item in export["not_exported"]] == ["failed"]


async def test_a_client_that_disconnects_mid_stream_aborts_the_vllm_request(rig: Rig) -> None:
    proxy, server = rig.proxy, rig.server
    session_id, key = await proxy.start_session()
    path = "/v1/chat/completions"
    body = with_max_tokens(path, "a long one", Fault.TRICKLE, stream=True)
    headers = {"authorization": f"Bearer {key}"}
    content = 0
    async with proxy.http.stream("POST", f"{proxy.url}{path}", json=body, headers=headers) as r:
        async for line in r.aiter_lines():
            content += line.startswith("data:") and '"content"' in line
            if content >= 3:
                break  # leaving the block closes the connection

    # The proxy closed its connection to vLLM (which is how vLLM learns to abort), long
    # before the 500 tokens were sent.
    await poll(lambda: server.disconnects == 1, 10, "vLLM to see the disconnect")
    assert server.trickled < 250
    async with asyncio.timeout(DEADLINE):
        after = await ok_call(proxy, key, path, "still here")
        export = await end_and_export(proxy, key, session_id)
    assert [item["interaction_id"] for item in export["interactions"]] == [after]
    assert [item["status"] for item in export["not_exported"]] == ["aborted"]
