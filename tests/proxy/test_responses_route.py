"""/v1/responses (and its alias /responses) through a real uvicorn server and the openai client."""

from __future__ import annotations

import itertools
import json
from typing import Any

import openai
import pytest
from add_tool import QUESTION, RESPONSES_ADD_TOOL

from rltap.testing.proxy import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX


def client_for(proxy: RunningProxy, key: str, *, alias: bool = False) -> openai.AsyncOpenAI:
    base_url = proxy.url if alias else proxy.base_url
    return openai.AsyncOpenAI(base_url=base_url, api_key=key, http_client=proxy.http)


async def end_and_export(proxy: RunningProxy, key: str, session_id: str, **kw: Any) -> Any:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    return await proxy.export(session_id, **kw)


@pytest.mark.parametrize(
    "alias", [pytest.param(False, id="v1-responses"), pytest.param(True, id="responses-alias")]
)
async def test_create_returns_a_recorded_message(proxy: RunningProxy, alias: bool) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key, alias=alias)
    response = await client.responses.create(
        model="tiny", instructions="Be brief.", input="hello there"
    )
    assert response.status == "completed"
    assert response.output_text == "Turn 0: you said: hello there"
    (message,) = response.output
    assert message.type == "message"
    assert message.role == "assistant"
    assert response.usage is not None
    assert response.usage.output_tokens > 0

    export = await end_and_export(proxy, key, session_id)
    (item,) = export["interactions"]
    assert item["interaction_id"] == response.id
    assert item["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    assert item["output_len"] == response.usage.output_tokens
    assert item["input_len"] == response.usage.input_tokens


async def test_stream_sends_the_full_event_sequence(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key)
    async with client.responses.stream(model="tiny", input="stream this") as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert final.output_text == "Turn 0: you said: stream this"
    assert kinds.count("response.output_text.delta") >= 1
    assert [kind for kind, _ in itertools.groupby(kinds)] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    export = await end_and_export(proxy, key, session_id)
    assert [item["interaction_id"] for item in export["interactions"]] == [final.id]


@pytest.mark.parametrize(
    "history",
    [
        pytest.param("items", id="history-as-items"),
        pytest.param("previous_response_id", id="previous-response-id"),
    ],
)
@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_function_call_round_trip_links_the_turns(
    proxy: RunningProxy, history: str, stream: bool
) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key)
    if stream:
        async with client.responses.stream(
            model="tiny", input=QUESTION, tools=[RESPONSES_ADD_TOOL]
        ) as events:
            kinds = [event.type async for event in events]
            first = await events.get_final_response()
        assert "response.function_call_arguments.delta" in kinds
        assert "response.function_call_arguments.done" in kinds
    else:
        first = await client.responses.create(
            model="tiny", input=QUESTION, tools=[RESPONSES_ADD_TOOL]
        )
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "add"
    assert json.loads(call.arguments) == {"a": 2, "b": 2}

    result = {"type": "function_call_output", "call_id": call.call_id, "output": "4"}
    if history == "items":
        second = await client.responses.create(
            model="tiny",
            tools=[RESPONSES_ADD_TOOL],
            input=[
                {"role": "user", "content": QUESTION},
                *[item.model_dump(exclude_none=True) for item in first.output],
                result,
            ],
        )
    else:
        second = await client.responses.create(
            model="tiny", tools=[RESPONSES_ADD_TOOL], previous_response_id=first.id, input=[result]
        )
    assert second.output_text == f"{FINAL_PREFIX} 4"

    reward = await proxy.session_post(key, "/rl/set_reward", {"reward": 1.0})
    assert reward.json()["interaction_id"] == second.id
    export = await end_and_export(proxy, key, session_id, discount=0.5)
    parents = {item["interaction_id"]: item["parent_id"] for item in export["interactions"]}
    assert parents == {first.id: None, second.id: first.id}
    rewards = {item["interaction_id"]: item["reward"] for item in export["interactions"]}
    assert rewards == {first.id: 0.5, second.id: 1.0}


async def test_previous_response_id_is_resolved_within_the_session_only(
    proxy: RunningProxy,
) -> None:
    _, key = await proxy.start_session()
    _, other_key = await proxy.start_session()
    first = await client_for(proxy, key).responses.create(model="tiny", input="remember me")
    stranger = client_for(proxy, other_key)
    with pytest.raises(openai.NotFoundError) as caught:
        await stranger.responses.create(
            model="tiny", previous_response_id=first.id, input="what did I say?"
        )
    assert caught.value.body is not None
    assert "previous_response_id" in json.dumps(caught.value.body)
    follow_up = await client_for(proxy, key).responses.create(
        model="tiny", previous_response_id=first.id, input="what did I say?"
    )
    assert follow_up.output_text == "Turn 1: you said: what did I say?"


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_the_output_limit_applied_is_echoed(proxy: RunningProxy, stream: bool) -> None:
    # The proxy's default (256 tokens) applies when the request sets none; a limit sent is
    # echoed as sent. OpenAI echoes the limit it applied, never null.
    _, key = await proxy.start_session()
    client = client_for(proxy, key)
    echoed = []
    for limit in (None, 40):
        extra: dict[str, Any] = {} if limit is None else {"max_output_tokens": limit}
        if not stream:
            response = await client.responses.create(model="tiny", input="hello", **extra)
            echoed.append([response.max_output_tokens])
            continue
        async with client.responses.stream(model="tiny", input="hello", **extra) as events:
            snapshots = [
                e.response.max_output_tokens async for e in events if hasattr(e, "response")
            ]
        echoed.append(snapshots)
    per_event = 1 if not stream else 3  # created, in_progress, completed
    assert echoed == [[256] * per_event, [40] * per_event]
