"""`langchain.agents.create_agent` tool agents through the adapter, against a real proxy.

The scripted engine makes a real tool call on the first turn and answers with the tool's result
on the second: two recorded interactions, the second continuing the first.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from lc_builders import QUESTION, TOOL_RESULT, agent_input, build_agent, exact_match

from rltap.adapter import Api
from rltap_langchain import LangChainAdapter, final_text

ROW = {"kind": "agent", "question": QUESTION}


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_tool_call_round_trips_and_links_the_turns(
    run_episode: Any, api: Api, stream: bool
) -> None:
    adapter = LangChainAdapter(build_agent, api=api, stream=stream, input_fn=agent_input)
    episode = await run_episode(adapter, ROW)
    messages = episode.result["messages"]
    call_message = next(m for m in messages if isinstance(m, AIMessage) and m.tool_calls)
    (call,) = call_message.tool_calls
    assert (call["name"], call["args"]) == ("calculator", {"expression": "2+3"})
    (tool_message,) = [m for m in messages if isinstance(m, ToolMessage)]
    assert tool_message.content == TOOL_RESULT
    assert final_text(episode.result) == f"Final answer: {TOOL_RESULT}"

    first, second = episode.interactions
    assert first["parent_id"] is None
    assert second["parent_id"] == first["interaction_id"]
    (recorded_call,) = first["output_message_list"][0]["tool_calls"]
    assert json.loads(recorded_call["function"]["arguments"]) == {"expression": "2+3"}
    assert second["messages"][-1]["role"] == "tool"
    assert second["output_text"] == f"Final answer: {TOOL_RESULT}"


async def test_sync_agent_runs_in_a_thread_with_the_sync_client(run_episode: Any) -> None:
    adapter = LangChainAdapter(build_agent, sync=True, input_fn=agent_input, reward_fn=exact_match)
    episode = await run_episode(adapter, ROW)
    assert episode.result == 1.0
    first, second = episode.interactions
    assert second["parent_id"] == first["interaction_id"]
