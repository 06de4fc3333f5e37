"""The Agents SDK's server-side memory against rltap: `OpenAIConversationsSession` (the
Conversations API), `Runner.run(conversation_id=...)` (Responses with `conversation`) and
`OpenAIResponsesCompactionSession` (`responses.compact`), run unchanged, each call recorded."""

from __future__ import annotations

from typing import Any

import openai
from agents import (
    Agent,
    OpenAIConversationsSession,
    OpenAIResponsesCompactionSession,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    SQLiteSession,
)

from rltap.testing import RunningProxy

NO_TRACING = RunConfig(tracing_disabled=True)


def agent_on(client: openai.AsyncOpenAI) -> Agent[Any]:
    model = OpenAIResponsesModel(model="tiny", openai_client=client)
    return Agent(name="chat", instructions="Answer briefly.", model=model)


async def recorded(proxy: RunningProxy, key: str, session_id: str) -> list[dict[str, Any]]:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    export = await proxy.export(session_id)
    return list(export["interactions"])


async def test_conversations_session_keeps_the_history_on_the_proxy(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)
    memory = OpenAIConversationsSession(openai_client=client)
    agent = agent_on(client)

    first = await Runner.run(agent, "hello", session=memory, run_config=NO_TRACING)
    second = await Runner.run(agent, "again", session=memory, run_config=NO_TRACING)
    assert first.final_output == "Turn 0: you said: hello"
    assert second.final_output == "Turn 1: you said: again"

    items = await memory.get_items()
    said = [(item["role"], item["content"][0]["text"]) for item in items]  # type: ignore[typeddict-item]
    assert said == [
        ("user", "hello"),
        ("assistant", "Turn 0: you said: hello"),
        ("user", "again"),
        ("assistant", "Turn 1: you said: again"),
    ]
    assert (await memory.get_items(limit=1)) == items[-1:]
    popped = await memory.pop_item()
    assert popped == items[-1]
    assert len(await memory.get_items()) == 3
    conversation_id = memory.session_id
    await memory.clear_session()
    try:
        await client.conversations.retrieve(conversation_id)
    except openai.NotFoundError:
        pass
    else:
        raise AssertionError("the cleared conversation is still there")

    nodes = await recorded(proxy, key, session_id)
    assert [node["parent_id"] for node in nodes] == [None, nodes[0]["interaction_id"]]
    assert [m["role"] for m in nodes[1]["messages"]] == ["system", "user", "assistant", "user"]


async def test_runner_with_conversation_id_lets_the_proxy_hold_the_history(
    proxy: RunningProxy,
) -> None:
    session_id, key = await proxy.start_session()
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)
    conversation = await client.conversations.create()
    agent = agent_on(client)
    for text in ("hello", "again"):
        await Runner.run(agent, text, conversation_id=conversation.id, run_config=NO_TRACING)

    listed = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert [item.role for item in listed] == ["user", "assistant", "user", "assistant"]  # type: ignore[union-attr]
    nodes = await recorded(proxy, key, session_id)
    assert [node["parent_id"] for node in nodes] == [None, nodes[0]["interaction_id"]]
    system = [m for m in nodes[1]["messages"] if m["role"] == "system"]
    assert system == [{"role": "system", "content": "Answer briefly."}]  # once, not per turn


async def test_compaction_session_compacts_through_the_proxy(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)
    memory = OpenAIResponsesCompactionSession(
        "episode",
        SQLiteSession("episode"),
        client=client,
        model="gpt-4.1",  # the SDK insists on an OpenAI name; the proxy serves its one model
        should_trigger_compaction=lambda context: False,  # compacted by hand, below
    )
    agent = agent_on(client)
    await Runner.run(agent, "hello", session=memory, run_config=NO_TRACING)
    await memory.run_compaction({"force": True, "compaction_mode": "input"})
    items = await memory.get_items()
    assert [item["type"] for item in items] == ["message", "compaction"]  # type: ignore[typeddict-item]
    summary = items[1]["encrypted_content"]  # type: ignore[typeddict-item]

    after = await Runner.run(agent, "and now?", session=memory, run_config=NO_TRACING)
    assert after.final_output == "Turn 1: you said: and now?"  # one assistant turn: the summary
    nodes = await recorded(proxy, key, session_id)
    assert [node["output_text"] for node in nodes][1] == summary  # the compaction, recorded
    assert nodes[2]["messages"][-2:] == [
        {"role": "assistant", "content": summary},
        {"role": "user", "content": "and now?"},
    ]
