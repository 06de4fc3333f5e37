"""/v1/chat/completions through a real uvicorn server, driven by the official openai client."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from add_tool import CHAT_ADD_TOOL

from rltap.testing.proxy import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX


def client_for(proxy: RunningProxy, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=key, http_client=proxy.http)


async def test_plain_reply_is_recorded_with_tokens(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key)
    completion = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello there"}]
    )
    assert completion.choices[0].message.content == "Turn 0: you said: hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 0
    export = await end_and_export(proxy, key, session_id)
    (item,) = export["interactions"]
    assert item["interaction_id"] == completion.id
    assert item["output_len"] == completion.usage.completion_tokens
    assert item["input_len"] == completion.usage.prompt_tokens


async def end_and_export(proxy: RunningProxy, key: str, session_id: str, **kw: Any) -> Any:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    return await proxy.export(session_id, **kw)


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_tool_call_round_trip_links_the_turns(proxy: RunningProxy, stream: bool) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key)
    messages: list[Any] = [{"role": "user", "content": "what is 2 + 2?"}]
    if stream:
        async with client.chat.completions.stream(
            model="tiny", messages=messages, tools=[CHAT_ADD_TOOL]
        ) as events:
            first = (await events.get_final_completion()).choices[0]
    else:
        first = (
            await client.chat.completions.create(
                model="tiny", messages=messages, tools=[CHAT_ADD_TOOL]
            )
        ).choices[0]
    assert first.finish_reason == "tool_calls"
    (call,) = first.message.tool_calls or []
    assert call.function.name == "add"
    assert json.loads(call.function.arguments) == {"a": 2, "b": 2}
    messages += [
        first.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "4"},
    ]
    second = await client.chat.completions.create(
        model="tiny", messages=messages, tools=[CHAT_ADD_TOOL]
    )
    assert second.choices[0].message.content == f"{FINAL_PREFIX} 4"
    await proxy.session_post(key, "/rl/set_reward", {"reward": 1.0})
    export = await end_and_export(proxy, key, session_id, discount=0.5, style="concat")
    (leaf,) = export["interactions"]
    assert leaf["interaction_id"] == second.id
    assert leaf["reward"] == 1.0
