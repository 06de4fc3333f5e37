"""Links as the official clients make them: a last call without tools after a tool loop (Chat,
Responses, Anthropic), agents named by the `X-Rltap-Agent` header, and the export's link fields,
link factors and agent filter."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from add_tool import ANTHROPIC_ADD_TOOL, CHAT_ADD_TOOL, QUESTION, RESPONSES_ADD_TOOL
from clients import anthropic_client, openai_client

from rltap.client.proxy import interactions_from_export
from rltap.record.types import Link
from rltap.testing.proxy import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX
from rltap.tree.links import agent_header_value

DISCOUNT = 0.9


async def end_and_export(proxy: RunningProxy, key: str, session_id: str, **kw: Any) -> Any:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    return await proxy.export(session_id, discount=DISCOUNT, **kw)


def by_id(export: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["interaction_id"]: item for item in export["interactions"]}


async def reward_last(proxy: RunningProxy, key: str) -> None:
    response = await proxy.session_post(key, "/rl/set_reward", {"reward": 1.0})
    assert response.status_code == 200, response.text


async def two_named_turns(
    proxy: RunningProxy, key: str, first_agent: str, second_agent: str
) -> tuple[Any, Any]:
    """Two chat turns of one conversation, each named by its agent (the second: a handoff)."""
    client = openai_client(proxy, key)
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    turns = []
    for agent in (first_agent, second_agent):
        completion = await client.chat.completions.create(
            model="tiny",
            messages=messages,
            extra_headers={"X-Rltap-Agent": agent_header_value(agent)},
        )
        turns.append(completion)
        messages += [
            completion.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": "go on"},
        ]
    return turns[0], turns[1]


def assert_final_call_is_a_rewrite(export: dict[str, Any], first_id: str, last_id: str) -> None:
    items = by_id(export)
    first, last = items[first_id], items[last_id]
    assert (first["link"], first["parent_id"]) == ("root", None)
    assert (last["link"], last["parent_id"]) == ("rewrite", first_id)
    assert last["agent_id"] == first["agent_id"]
    assert first["agent_id"].startswith("agent-")
    assert last["reward"] == pytest.approx(1.0)
    assert first["reward"] == pytest.approx(DISCOUNT)


async def test_chat_final_call_without_tools_is_a_rewrite_and_gets_credit(
    proxy: RunningProxy,
) -> None:
    session_id, key = await proxy.start_session()
    client = openai_client(proxy, key)
    messages: list[Any] = [
        {"role": "system", "content": "Add."},
        {"role": "user", "content": QUESTION},
    ]
    first = await client.chat.completions.create(
        model="tiny", messages=messages, tools=[CHAT_ADD_TOOL]
    )
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "4"},
    ]
    last = await client.chat.completions.create(model="tiny", messages=messages)  # no tools
    assert last.choices[0].message.content == f"{FINAL_PREFIX} 4"
    await reward_last(proxy, key)
    export = await end_and_export(proxy, key, session_id)
    assert_final_call_is_a_rewrite(export, first.id, last.id)


@pytest.mark.parametrize("chained", [False, True], ids=["input-items", "previous-response-id"])
async def test_responses_final_call_without_tools_is_a_rewrite_and_gets_credit(
    proxy: RunningProxy, chained: bool
) -> None:
    session_id, key = await proxy.start_session()
    client = openai_client(proxy, key)
    first = await client.responses.create(
        model="tiny", instructions="Add.", input=QUESTION, tools=[RESPONSES_ADD_TOOL]
    )
    call = next(item for item in first.output if item.type == "function_call")
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "4"}
    if chained:
        last = await client.responses.create(
            model="tiny", instructions="Add.", previous_response_id=first.id, input=[result]
        )
    else:
        history = [{"role": "user", "content": QUESTION}, call.model_dump(exclude_none=True)]
        last = await client.responses.create(
            model="tiny", instructions="Add.", input=[*history, result]
        )
    assert last.output_text == f"{FINAL_PREFIX} 4"
    await reward_last(proxy, key)
    export = await end_and_export(proxy, key, session_id)
    assert_final_call_is_a_rewrite(export, first.id, last.id)


async def test_anthropic_tool_loop_whose_last_call_drops_the_tools(
    proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    session_id, key = await proxy.start_session()
    client = anthropic_client(proxy, key, http2)
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    first = await client.messages.create(
        model="tiny", system="Add.", max_tokens=256, messages=messages, tools=[ANTHROPIC_ADD_TOOL]
    )
    use = next(block for block in first.content if block.type == "tool_use")
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "4"}],
        },
    ]
    last = await client.messages.create(
        model="tiny", system="Add.", max_tokens=256, messages=messages
    )
    assert last.content[0].type == "text"
    assert last.content[0].text == f"{FINAL_PREFIX} 4"
    await reward_last(proxy, key)
    export = await end_and_export(proxy, key, session_id)
    assert_final_call_is_a_rewrite(export, first.id, last.id)


async def test_named_agents_handoff_and_the_export_keeps_the_ones_asked_for(
    proxy: RunningProxy,
) -> None:
    session_id, key = await proxy.start_session()
    triage, answer = await two_named_turns(proxy, key, "triage", "expert")
    await reward_last(proxy, key)
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text

    # A bad factor is refused before the session is freed: the export can be asked again.
    refused = await proxy.admin(
        "/export_trajectories", {"session_id": session_id, "link_factors": {"handof": 0.5}}
    )
    assert refused.status_code == 400, refused.text
    assert "link_factors" in refused.text

    export = await proxy.export(
        session_id, discount=DISCOUNT, link_factors={"handoff": 0.5}, agents=["triage"]
    )
    assert export["link_factors"] == {
        "prefix": 1.0,
        "rewrite": 1.0,
        "handoff": 0.5,
        "subagent": 1.0,
        "carry": 1.0,
    }
    [item] = export["interactions"]
    assert (item["interaction_id"], item["agent_id"], item["link"]) == (triage.id, "triage", "root")
    assert item["reward"] == pytest.approx(DISCOUNT * 0.5)
    assert answer.id not in by_id(export)


async def test_an_overlong_agent_header_is_a_400_in_each_apis_envelope(
    proxy: RunningProxy,
) -> None:
    _, key = await proxy.start_session()
    headers = {"authorization": f"Bearer {key}", "x-rltap-agent": "a" * 257}
    bodies = {
        "/v1/chat/completions": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
        "/v1/responses": {"model": "tiny", "input": "hi"},
        "/v1/messages": {
            "model": "tiny",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
        },
    }
    for path, body in bodies.items():
        response = await proxy.http.post(f"{proxy.url}{path}", json=body, headers=headers)
        assert response.status_code == 400, (path, response.text)
        error = response.json()["error"]
        assert "X-Rltap-Agent" in error["message"]
        if path == "/v1/messages":
            assert response.json()["type"] == "error"
        else:
            assert error["param"] == "X-Rltap-Agent"


async def test_a_rebuilt_export_without_the_parent_still_names_it(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    first, second = await two_named_turns(proxy, key, "Triagé", "expert")
    export = await end_and_export(proxy, key, session_id, agents=["expert"])
    [rebuilt] = interactions_from_export(export).values()
    assert (rebuilt.interaction_id, rebuilt.parent_id, rebuilt.parent) == (
        second.id,
        first.id,
        None,
    )
    assert rebuilt.link is Link.HANDOFF
    assert proxy.state.store.open_sessions == 0
