"""The Responses API's server-side state through a real server and the openai client: stored
responses (`GET /v1/responses/{id}`), conversations and their items, responses in a
conversation, compaction; all of it scoped to the caller's session."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from add_tool import QUESTION, RESPONSES_ADD_TOOL

from rltap.protocols.openai_responses.compaction import COMPACTION_PROMPT
from rltap.testing.proxy import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX


def client_for(proxy: RunningProxy, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=proxy.base_url, api_key=key, http_client=proxy.http, max_retries=0
    )


async def recorded(proxy: RunningProxy, key: str, session_id: str) -> dict[str, Any]:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    export = await proxy.export(session_id)
    return {item["interaction_id"]: item for item in export["interactions"]}


def assert_openai_not_found(error: openai.NotFoundError, needle: str) -> None:
    assert isinstance(error.body, dict)
    assert set(error.body) == {"message", "type", "param", "code"}  # the SDK unwraps "error"
    assert needle in error.body["message"]


# -- stored responses ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_retrieve_returns_the_response_as_answered(proxy: RunningProxy, stream: bool) -> None:
    _, key = await proxy.start_session()
    client = client_for(proxy, key)
    if stream:
        async with client.responses.stream(model="tiny", input="keep me") as events:
            _ = [event async for event in events]
            created = await events.get_final_response()
    else:
        created = await client.responses.create(model="tiny", input="keep me")
    retrieved = await client.responses.retrieve(created.id)
    assert retrieved.id == created.id
    assert retrieved.output_text == created.output_text == "Turn 0: you said: keep me"
    assert retrieved.status == "completed"
    assert [item.id for item in retrieved.output] == [item.id for item in created.output]


async def test_retrieve_never_shows_another_sessions_response(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    _, other_key = await proxy.start_session()
    created = await client_for(proxy, key).responses.create(model="tiny", input="mine")
    for response_id in (created.id, "resp_unknown"):
        with pytest.raises(openai.NotFoundError) as caught:
            await client_for(proxy, other_key).responses.retrieve(response_id)
        assert_openai_not_found(caught.value, response_id)
    chat = await client_for(proxy, key).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "a chat completion"}]
    )
    with pytest.raises(openai.NotFoundError):  # a chat completion is not a stored response
        await client_for(proxy, key).responses.retrieve(chat.id)


# -- conversations and items --------------------------------------------------------------------


async def test_conversation_items_create_add_list_and_delete(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    client = client_for(proxy, key)
    conversation = await client.conversations.create(
        items=[{"role": "user", "content": "first"}], metadata={"topic": "t"}
    )
    assert conversation.id.startswith("conv_")
    assert conversation.metadata == {"topic": "t"}
    added = await client.conversations.items.create(
        conversation.id,
        items=[
            {"role": "assistant", "content": "second"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "3"}]},
        ],
    )
    assert [item.type for item in added.data] == ["message", "message"]
    assert added.first_id == added.data[0].id
    assert added.last_id == added.data[1].id

    ascending = [
        item
        async for item in client.conversations.items.list(conversation.id, order="asc", limit=2)
    ]
    texts = [item.content[0].text for item in ascending]  # type: ignore[union-attr]
    assert texts == ["first", "second", "3"]  # three items over two pages of at most two
    assert [item.content[0].type for item in ascending] == [  # type: ignore[union-attr]
        "input_text",
        "output_text",
        "input_text",
    ]
    assert all(item.status == "completed" for item in ascending)  # type: ignore[union-attr]
    page = await client.conversations.items.list(conversation.id, limit=1)
    assert [item.id for item in page.data] == [ascending[-1].id]  # newest first by default
    assert page.has_more

    item = await client.conversations.items.retrieve(
        ascending[1].id, conversation_id=conversation.id
    )
    assert item.id == ascending[1].id
    after_delete = await client.conversations.items.delete(
        ascending[1].id, conversation_id=conversation.id
    )
    assert after_delete.id == conversation.id
    left = [item.id async for item in client.conversations.items.list(conversation.id)]
    assert left == [ascending[2].id, ascending[0].id]

    updated = await client.conversations.update(conversation.id, metadata={"topic": "u"})
    assert updated.metadata == {"topic": "u"}
    assert (await client.conversations.retrieve(conversation.id)).metadata == {"topic": "u"}
    deleted = await client.conversations.delete(conversation.id)
    assert (deleted.id, deleted.deleted) == (conversation.id, True)
    with pytest.raises(openai.NotFoundError) as caught:
        await client.conversations.retrieve(conversation.id)
    assert_openai_not_found(caught.value, conversation.id)


async def test_conversations_are_scoped_to_the_session(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    _, other_key = await proxy.start_session()
    conversation = await client_for(proxy, key).conversations.create()
    stranger = client_for(proxy, other_key)
    with pytest.raises(openai.NotFoundError):
        await stranger.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        await stranger.conversations.items.create(
            conversation.id, items=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(openai.NotFoundError):
        await stranger.conversations.items.list(conversation.id)
    with pytest.raises(openai.NotFoundError) as caught:
        await stranger.responses.create(model="tiny", conversation=conversation.id, input="x")
    assert caught.value.body["param"] == "conversation"  # type: ignore[index]
    items = await client_for(proxy, key).conversations.items.list(conversation.id)
    assert items.data == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param(
            {"items": [{"type": "web_search_call", "id": "w"}]}, "items[0].type", id="hosted"
        ),
        pytest.param({"items": [{"role": "user"}]}, "items[0].content", id="no-content"),
        pytest.param({"items": [{"role": "user", "content": "x"}] * 21}, "items", id="too-many"),
        pytest.param({"metadata": {"k": 1}}, "metadata.k", id="metadata"),
    ],
)
async def test_bad_conversation_bodies_are_400s_naming_the_field(
    proxy: RunningProxy, body: dict[str, Any], param: str
) -> None:
    _, key = await proxy.start_session()
    response = await proxy.session_post(key, "/v1/conversations", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


async def test_listing_with_a_bad_limit_or_cursor(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    client = client_for(proxy, key)
    conversation = await client.conversations.create(items=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as bad:
        await client.conversations.items.list(conversation.id, limit=101)
    assert bad.value.body["param"] == "limit"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as missing:
        await client.conversations.items.list(conversation.id, after="msg_nope")
    assert missing.value.body["param"] == "after"  # type: ignore[index]


# -- responses in a conversation ----------------------------------------------------------------


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_a_response_reads_and_extends_its_conversation(
    proxy: RunningProxy, stream: bool
) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key)
    conversation = await client.conversations.create(items=[{"role": "user", "content": "hello"}])
    replies = []
    for text in ("first", "second"):
        if stream:
            async with client.responses.stream(
                model="tiny", conversation={"id": conversation.id}, input=text
            ) as events:
                _ = [event async for event in events]
                reply = await events.get_final_response()
        else:
            reply = await client.responses.create(
                model="tiny", conversation=conversation.id, input=text
            )
        assert reply.conversation is not None
        assert reply.conversation.id == conversation.id
        replies.append(reply)
    assert replies[1].output_text == "Turn 1: you said: second"

    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    summary = [(item.type, item.role, item.content[0].text) for item in items]  # type: ignore[union-attr]
    assert summary == [
        ("message", "user", "hello"),
        ("message", "user", "first"),
        ("message", "assistant", replies[0].output_text),
        ("message", "user", "second"),
        ("message", "assistant", replies[1].output_text),
    ]
    assert items[2].id == replies[0].output[0].id  # the output items keep their ids

    nodes = await recorded(proxy, key, session_id)
    assert nodes[replies[1].id]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "user", "content": [{"type": "text", "text": "first"}]},  # as stored
        {"role": "assistant", "content": [{"type": "text", "text": replies[0].output_text}]},
        {"role": "user", "content": "second"},
    ]
    # The conversation's history is the first reply's prompt and output (a text part list and a
    # string are the same message to the cache): one token sequence.
    assert nodes[replies[1].id]["parent_id"] == replies[0].id


async def test_a_function_call_round_trip_in_a_conversation(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key)
    conversation = await client.conversations.create()
    first = await client.responses.create(
        model="tiny", conversation=conversation.id, input=QUESTION, tools=[RESPONSES_ADD_TOOL]
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert json.loads(call.arguments) == {"a": 2, "b": 2}
    second = await client.responses.create(
        model="tiny",
        conversation=conversation.id,
        tools=[RESPONSES_ADD_TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "4"}],
    )
    assert second.output_text == f"{FINAL_PREFIX} 4"
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert [item.type for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    nodes = await recorded(proxy, key, session_id)
    assert nodes[second.id]["parent_id"] == first.id


async def test_conversation_and_previous_response_id_together_are_a_400(
    proxy: RunningProxy,
) -> None:
    _, key = await proxy.start_session()
    client = client_for(proxy, key)
    conversation = await client.conversations.create()
    first = await client.responses.create(model="tiny", input="x")
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(
            model="tiny", conversation=conversation.id, previous_response_id=first.id, input="y"
        )
    assert caught.value.body["param"] == "conversation"  # type: ignore[index]
    items = await client.conversations.items.list(conversation.id)
    assert items.data == []  # a refused response adds nothing


# -- compaction ---------------------------------------------------------------------------------


async def test_compact_summarises_with_a_recorded_generation(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key)
    history: list[Any] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "reply one"},
        {"role": "user", "content": [{"type": "input_text", "text": "two"}]},
        {"role": "assistant", "content": "reply two"},
    ]
    compacted = await client.responses.compact(model="gpt-4.1", input=history)
    assert compacted.object == "response.compaction"
    *users, compaction = compacted.output
    assert [(u.type, u.role, u.content[0].text) for u in users] == [  # type: ignore[union-attr]
        ("message", "user", "one"),
        ("message", "user", "two"),
    ]
    assert compaction.type == "compaction"
    summary = compaction.encrypted_content  # type: ignore[union-attr]
    assert summary == f"Turn 2: you said: {COMPACTION_PROMPT}"  # the scripted model's words

    # The compacted history goes on as input: the summary is the model's own earlier turn.
    follow_up = await client.responses.create(
        model="tiny",
        input=[
            # The SDK types user messages of the output as output messages: it warns, as the
            # Agents SDK knows (it dumps them with warnings=False too).
            *(item.model_dump(exclude_none=True, warnings=False) for item in compacted.output),
            {"role": "user", "content": "next"},
        ],
    )
    nodes = await recorded(proxy, key, session_id)
    summarised = nodes[compacted.id]
    assert summarised["messages"][-1] == {"role": "user", "content": COMPACTION_PROMPT}
    assert summarised["output_text"] == summary
    assert compacted.usage.output_tokens == summarised["output_len"]
    assert nodes[follow_up.id]["messages"][-2:] == [
        {"role": "assistant", "content": summary},
        {"role": "user", "content": "next"},
    ]
    # The compacted history is a rewrite of the summarising call: one tree, credit flows back.
    assert (nodes[follow_up.id]["link"], nodes[follow_up.id]["parent_id"]) == (
        "rewrite",
        compacted.id,
    )


async def test_compact_a_stored_response_continues_it(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    _, other_key = await proxy.start_session()
    client = client_for(proxy, key)
    first = await client.responses.create(model="tiny", instructions="Be brief.", input="one")
    with pytest.raises(openai.NotFoundError):
        await client_for(proxy, other_key).responses.compact(
            model="gpt-4.1", previous_response_id=first.id
        )
    # The instructions are the call's own (not carried over): sent again, the prompt continues.
    compacted = await client.responses.compact(
        model="gpt-4.1", instructions="Be brief.", previous_response_id=first.id
    )
    assert [item.type for item in compacted.output] == ["message", "compaction"]
    nodes = await recorded(proxy, key, session_id)
    assert nodes[compacted.id]["parent_id"] == first.id  # one token sequence


async def test_compact_needs_something_to_compact(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    with pytest.raises(openai.BadRequestError) as caught:
        await client_for(proxy, key).responses.compact(model="gpt-4.1")
    assert caught.value.body["param"] == "input"  # type: ignore[index]


async def test_a_conversation_keeps_compaction_items(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    client = client_for(proxy, key)
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "summary"}
    conversation = await client.conversations.create(
        items=[{"role": "user", "content": "one"}, compaction]  # type: ignore[list-item]
    )
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert items[1].model_dump(exclude_none=True) == compaction


@pytest.mark.parametrize(
    ("part", "param"),
    [
        pytest.param({"type": "input_text"}, "input[0].content[0].text", id="text-without-text"),
        pytest.param(
            {"type": "input_image", "image_url": "data:x"}, "input[0].content[0]", id="image"
        ),
    ],
)
async def test_errors_in_the_input_name_the_clients_own_items(
    proxy: RunningProxy, part: dict[str, Any], param: str
) -> None:
    """Behind two items of history, the client's first item is still `input[0]`."""
    _, key = await proxy.start_session()
    client = client_for(proxy, key)
    conversation = await client.conversations.create(
        items=[{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]
    )
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(
            model="tiny",
            conversation=conversation.id,
            input=[{"role": "user", "content": [part]}],  # type: ignore[list-item]
        )
    assert caught.value.body["param"] == param  # type: ignore[index]


async def test_compacting_an_agents_conversation_is_a_rewrite_of_it(proxy: RunningProxy) -> None:
    # As the Agents SDK's compaction session does: the agent's calls carry its instructions, the
    # compaction call only the conversation; then the agent goes on from the compacted history.
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key)
    instructions = "You are the helpful agent."
    first = await client.responses.create(model="tiny", instructions=instructions, input="one")
    history: list[Any] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": first.output_text},
    ]
    compacted = await client.responses.compact(model="tiny", input=history)
    follow_up = await client.responses.create(
        model="tiny",
        instructions=instructions,
        input=[
            *(item.model_dump(exclude_none=True, warnings=False) for item in compacted.output),
            {"role": "user", "content": "next"},
        ],
    )
    nodes = await recorded(proxy, key, session_id)
    links = {
        name: (nodes[id_]["link"], nodes[id_]["parent_id"], nodes[id_]["agent_id"])
        for name, id_ in (("compaction", compacted.id), ("follow-up", follow_up.id))
    }
    agent = nodes[first.id]["agent_id"]
    assert links == {
        "compaction": ("rewrite", first.id, agent),
        "follow-up": ("rewrite", compacted.id, agent),
    }
