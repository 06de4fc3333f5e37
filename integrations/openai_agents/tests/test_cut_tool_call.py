"""A forced tool call the token limit cuts: the Agents SDK never takes its markup as the answer.

With `tool_choice="required"` and a `max_tokens` too small for the call, the model stops inside
`<tool_call>{"name": "`. rltap answers as OpenAI does when a reply runs out of tokens (Chat:
`finish_reason: "length"`, Responses: `incomplete`, `max_output_tokens`) with neither text nor a
call, and the SDK then raises its `ModelBehaviorError` for a truncated empty reply, as it does
against OpenAI, instead of printing the raw markup as the agent's final output. The cut reply is
still recorded with the engine's tokens.
"""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, ModelBehaviorError, ModelSettings, RunConfig, Runner
from oa_agents_for_tests import calculate

from rltap.adapter import Api, Connection
from rltap.testing import RunningProxy
from rltap_openai_agents import proxy_client, proxy_model, proxy_run_config

MAX_TOKENS = 6  # '<tool_call>', '\n', '{"', 'name', '":', ' "': cut before the tool's name
TRUNCATED = (
    r"finish_reason='length'|incomplete_details=IncompleteDetails\(reason='max_output_tokens'"
)


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_cut_forced_call_is_no_final_answer(
    proxy: RunningProxy, api: Api, stream: bool
) -> None:
    session_id, key = await proxy.start_session()
    model = proxy_model(proxy_client(Connection(proxy.base_url, key, proxy.http)), api)
    agent = Agent(
        name="calculator",
        instructions="Answer with the calculator tool.",
        tools=[calculate],
        model_settings=ModelSettings(tool_choice="required", max_tokens=MAX_TOKENS),
    )
    with pytest.raises(ModelBehaviorError, match=TRUNCATED):
        await _run(agent, proxy_run_config(model), stream)
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    (item,) = (await proxy.export(session_id))["interactions"]
    assert (item["output_len"], item["output_text"]) == (MAX_TOKENS, "")


async def _run(agent: Agent[Any], config: RunConfig, stream: bool) -> None:
    if not stream:
        await Runner.run(agent, "What is 2+3?", run_config=config)
        return
    streamed = Runner.run_streamed(agent, "What is 2+3?", run_config=config)
    async for _ in streamed.stream_events():
        pass
