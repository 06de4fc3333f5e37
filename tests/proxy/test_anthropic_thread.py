"""The anthropic SDK's own agent loop, `client.beta.messages.tool_runner`, over a message thread.

After its first turn the runner sends `thread: {"type": "continue", "previous_message_id"}`
with only the new tool result (no `system`, no `tools`): the session resolves it like Responses'
`previous_response_id`, so the call sees the whole conversation and links to the one it
continues. A message the session lacks is a 404 `thread_not_found`, on which the SDK replays the
whole history under a new thread.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from add_tool import QUESTION
from anthropic import beta_async_tool

from rltap.testing.proxy import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX


@beta_async_tool
async def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return str(a + b)


@pytest.fixture
async def sent() -> list[dict[str, Any]]:
    return []


@pytest.fixture
async def http2(sent: list[dict[str, Any]]) -> AsyncIterator[httpx2.AsyncClient]:
    async def record(request: httpx2.Request) -> None:
        if request.url.path == "/v1/messages":
            sent.append(orjson.loads(request.content))

    async with httpx2.AsyncClient(timeout=120, event_hooks={"request": [record]}) as client:
        yield client


async def test_tool_runner_continues_its_thread(
    proxy: RunningProxy, http2: httpx2.AsyncClient, sent: list[dict[str, Any]]
) -> None:
    session_id, key = await proxy.start_session()
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key=key, http_client=http2)
    runner = client.beta.messages.tool_runner(
        model="tiny",
        max_tokens=128,
        system="You add numbers.",
        tools=[add],
        messages=[{"role": "user", "content": QUESTION}],
    )
    replies = [message async for message in runner]
    assert [reply.stop_reason for reply in replies] == ["tool_use", "end_turn"]
    final = replies[-1].content[0]
    assert final.type == "text"
    assert final.text == f"{FINAL_PREFIX} 4"

    # What the SDK sent: a thread created, then continued with the tool result alone.
    assert [body.get("thread") for body in sent] == [
        {"type": "create"},
        {"type": "continue", "previous_message_id": replies[0].id},
    ]
    (tool_turn,) = sent[1]["messages"]
    assert [block["type"] for block in tool_turn["content"]] == ["tool_result"]
    assert "tools" not in sent[1]
    assert "system" not in sent[1]

    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = await proxy.export(session_id)
    first, second = export["interactions"]
    assert (first["interaction_id"], second["interaction_id"]) == (replies[0].id, replies[1].id)
    # Linked: a call only continues one with the same tools, so the thread's tools carried over.
    assert second["parent_id"] == first["interaction_id"]
    # The continuation's prompt is the whole conversation.
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["input_len"] > first["input_len"] + first["output_len"]


async def test_an_unknown_thread_message_is_thread_not_found(
    proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    _, key = await proxy.start_session()
    response = await http2.post(
        f"{proxy.url}/v1/messages",
        headers={"x-api-key": key},
        json={
            "model": "tiny",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "go on"}],
            "thread": {"type": "continue", "previous_message_id": "msg_unknown"},
        },
    )
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "not_found_error"
    assert error["details"] == {"error_code": "thread_not_found"}
    assert "msg_unknown" in error["message"]


async def test_a_continuation_forcing_a_tool_its_thread_lacks_is_400(
    proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    _, key = await proxy.start_session()
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key=key, http_client=http2)
    first = await client.messages.create(
        model="tiny", max_tokens=32, messages=[{"role": "user", "content": "hello"}]
    )
    with pytest.raises(anthropic.BadRequestError) as info:
        await client.messages.create(
            model="tiny",
            max_tokens=32,
            messages=[{"role": "user", "content": "and now?"}],
            tool_choice={"type": "tool", "name": "add"},
            extra_body={"thread": {"type": "continue", "previous_message_id": first.id}},
        )
    assert "'add'" in info.value.message
    assert "tools" in info.value.message


async def test_the_sdk_replays_a_thread_the_session_lacks(
    proxy: RunningProxy, http2: httpx2.AsyncClient, sent: list[dict[str, Any]]
) -> None:
    _, first_key = await proxy.start_session()
    other_id, other_key = await proxy.start_session()
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key=first_key, http_client=http2)
    thread = client.beta.messages.thread(model="tiny", max_tokens=32)
    await thread.send({"role": "user", "content": "hello"})
    # The next turn goes to another session, which never saw the first: thread_not_found, and the
    # SDK sends the whole history again under a new thread.
    client.api_key = other_key
    reply = await thread.send({"role": "user", "content": "again"})
    assert reply.content[0].type == "text"
    assert [body["thread"]["type"] for body in sent] == ["create", "continue", "create"]
    assert [m["role"] for m in sent[2]["messages"]] == ["user", "assistant", "user"]
    assert (await proxy.session_post(other_key, "/rl/end_session")).status_code == 200
    (item,) = (await proxy.export(other_id))["interactions"]
    assert item["interaction_id"] == reply.id
    assert [m["content"] for m in item["messages"] if m["role"] == "user"] == ["hello", "again"]
