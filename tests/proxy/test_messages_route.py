"""/v1/messages through a real uvicorn server, driven by the official anthropic client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
import pytest
from add_tool import ANTHROPIC_ADD_TOOL, QUESTION

from rltap.testing.proxy import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX


@pytest.fixture
async def http2() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=120) as client:
        yield client


def client_for(proxy: RunningProxy, key: str, http: httpx2.AsyncClient) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=proxy.url, api_key=key, http_client=http)


async def end_and_export(proxy: RunningProxy, key: str, session_id: str, **kw: Any) -> Any:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    return await proxy.export(session_id, **kw)


async def test_create_returns_a_recorded_message(
    proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key, http2)
    message = await client.messages.create(
        model="tiny",
        max_tokens=256,
        system="Be brief.",
        messages=[{"role": "user", "content": "hello there"}],
    )
    assert message.role == "assistant"
    assert message.stop_reason == "end_turn"
    (block,) = message.content
    assert block.type == "text"
    assert block.text == "Turn 0: you said: hello there"
    assert message.usage.output_tokens > 0

    export = await end_and_export(proxy, key, session_id)
    (item,) = export["interactions"]
    assert item["interaction_id"] == message.id
    assert item["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    assert item["output_len"] == message.usage.output_tokens
    assert item["input_len"] == message.usage.input_tokens


async def test_stream_sends_the_event_sequence(
    proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key, http2)
    async with client.messages.stream(
        model="tiny", max_tokens=256, messages=[{"role": "user", "content": "stream this"}]
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert final.content[0].type == "text"
    assert final.content[0].text == "Turn 0: you said: stream this"
    assert final.stop_reason == "end_turn"
    raw = [k for k in kinds if k not in ("text", "ping")]  # "text": the SDK's own helper events
    assert raw[0] == "message_start"
    assert raw[1] == "content_block_start"
    assert set(raw[2:-3]) == {"content_block_delta"}
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    export = await end_and_export(proxy, key, session_id)
    assert [item["interaction_id"] for item in export["interactions"]] == [final.id]


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_tool_use_round_trip_links_the_turns(
    proxy: RunningProxy, http2: httpx2.AsyncClient, stream: bool
) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key, http2)
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    if stream:
        async with client.messages.stream(
            model="tiny", max_tokens=256, messages=messages, tools=[ANTHROPIC_ADD_TOOL]
        ) as events:
            kinds = [event.type async for event in events]
            first = await events.get_final_message()
        assert "input_json" in kinds  # the SDK's event for input_json_delta
    else:
        first = await client.messages.create(
            model="tiny", max_tokens=256, messages=messages, tools=[ANTHROPIC_ADD_TOOL]
        )
    assert first.stop_reason == "tool_use"
    uses = [block for block in first.content if block.type == "tool_use"]
    assert len(uses) == 1
    use = uses[0]
    assert use.name == "add"
    assert use.input == {"a": 2, "b": 2}

    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "4"}],
        },
    ]
    second = await client.messages.create(
        model="tiny", max_tokens=256, messages=messages, tools=[ANTHROPIC_ADD_TOOL]
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text"
    assert second.content[0].text == f"{FINAL_PREFIX} 4"

    export = await end_and_export(proxy, key, session_id)
    parents = {item["interaction_id"]: item["parent_id"] for item in export["interactions"]}
    assert parents == {first.id: None, second.id: first.id}


async def test_x_api_key_and_any_anthropic_version_are_accepted(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    body = {"model": "tiny", "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]}
    ids = []
    for version in ("2023-06-01", "2099-12-31", "not-a-date", None):
        headers = {"x-api-key": key}
        if version is not None:
            headers["anthropic-version"] = version
        response = await proxy.http.post(f"{proxy.url}/v1/messages", json=body, headers=headers)
        assert response.status_code == 200, (version, response.text)
        assert response.json()["type"] == "message"
        ids.append(response.json()["id"])
    response = await proxy.http.post(
        f"{proxy.url}/v1/messages", json=body, headers={"x-api-key": "sk-wrong"}
    )
    assert response.status_code == 401
    assert response.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid API key"},
    }
    export = await end_and_export(proxy, key, session_id)
    assert [item["interaction_id"] for item in export["interactions"]] == ids


async def test_the_sdk_sees_an_ended_session_as_an_error(
    proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    _, key = await proxy.start_session()
    client = anthropic.AsyncAnthropic(
        base_url=proxy.url, api_key=key, http_client=http2, max_retries=0
    )
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    with pytest.raises(anthropic.APIStatusError) as caught:
        await client.messages.create(
            model="tiny", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 410
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": caught.value.body["error"]["message"],
        },
    }
