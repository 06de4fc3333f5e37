"""`POST /v1/messages/count_tokens` through the anthropic SDK's `messages.count_tokens`.

The count is the prompt its `/v1/messages` call gets: equal to that call's `usage.input_tokens`,
with a system prompt and tools rendered by the chat template, in a fresh session and for a call
that continues a recorded one. Counting records nothing.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import pytest
from add_tool import ANTHROPIC_ADD_TOOL, QUESTION
from clients import anthropic_client

from rltap.testing.proxy import RunningProxy


async def test_count_equals_the_calls_input_tokens(
    proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    session_id, key = await proxy.start_session()
    client = anthropic_client(proxy, key, http2)
    request: dict[str, Any] = {
        "model": "tiny",
        "system": "You add numbers.",
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [ANTHROPIC_ADD_TOOL],
    }
    counted = await client.messages.count_tokens(**request)
    without_tools = await client.messages.count_tokens(
        model="tiny", system="You add numbers.", messages=request["messages"]
    )
    assert counted.input_tokens > without_tools.input_tokens > 0  # the tools are rendered
    first = await client.messages.create(max_tokens=64, **request)
    assert first.usage.input_tokens == counted.input_tokens

    # The next turn continues the first: counted the way its call renders it.
    use = next(block for block in first.content if block.type == "tool_use")
    request["messages"] = [
        *request["messages"],
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "4"}],
        },
    ]
    counted_next = await client.messages.count_tokens(**request)
    second = await client.messages.create(max_tokens=64, **request)
    assert second.usage.input_tokens == counted_next.input_tokens

    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = await proxy.export(session_id)
    assert [item["interaction_id"] for item in export["interactions"]] == [first.id, second.id]


async def test_count_needs_a_session_key_and_a_valid_body(
    proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    with pytest.raises(anthropic.AuthenticationError):
        await anthropic_client(proxy, "sk-wrong", http2).messages.count_tokens(
            model="tiny", messages=[{"role": "user", "content": "hi"}]
        )
    _, key = await proxy.start_session()
    client = anthropic_client(proxy, key, http2)
    with pytest.raises(anthropic.BadRequestError) as info:
        await client.messages.count_tokens(model="tiny", messages=[])
    assert info.value.body["type"] == "error"
    assert "messages" in info.value.message
    image = {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}
    with pytest.raises(anthropic.BadRequestError) as unsupported:
        await client.messages.count_tokens(
            model="tiny", messages=[{"role": "user", "content": [image]}]
        )
    assert "'image' at messages[0].content[0]" in unsupported.value.message
