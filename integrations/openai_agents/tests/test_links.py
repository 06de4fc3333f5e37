"""One episode, one tree: the SDK's multi-agent patterns through the real proxy, each call under
its agent's name (`X-Rltap-Agent`), linked to the call it came from, credited by the reward of
the final answer (`rltap.tree.links`, `rltap.tree.rewards`).

The scripted model plays each agent: it calls an offered tool it has not called yet (the triage
agent hands a Spanish question to the Spanish agent), answers with the last tool result, or,
without tools, repeats what it was asked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from agents import Agent, ModelSettings, Runner
from agents.run import CallModelData, ModelInputData
from oa_agents_for_tests import FINAL_ANSWER, calculate

from rltap.adapter import Connection
from rltap.config import EpisodeConfig
from rltap.record.types import InteractionWithTokenLogpReward, Link
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX, arguments_for, tool_loop
from rltap_openai_agents import (
    AgentFactory,
    OpenAIAgentsAdapter,
    proxy_client,
    proxy_model,
    proxy_run_config,
)

DISCOUNT = 0.9
QUESTION = "¿Cuánto es 2+3?"
ROW = {"question": QUESTION, "answer": FINAL_ANSWER}
TRIAGE, SPANISH, ENGLISH = "Triage agent", "Spanish agent", "English agent"
ORCHESTRATOR, TRANSLATOR = "orchestrator", "translator"
API_AND_STREAM = [
    pytest.param("chat", False, id="chat-json"),
    pytest.param("chat", True, id="chat-sse"),
    pytest.param("responses", False, id="responses-json"),
    pytest.param("responses", True, id="responses-sse"),
]


def _tool_name(tool: Mapping[str, Any]) -> str:
    return str(tool.get("function", tool)["name"])


def _called(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    return {
        call["function"]["name"] for message in messages for call in message.get("tool_calls") or []
    }


def each_tool_once(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """Call an offered tool not called yet (a handoff by the question's language), else answer
    with the last tool result, else repeat the question (`tool_loop` without tools)."""
    called = _called(messages)
    fresh = [tool for tool in tools or [] if _tool_name(tool) not in called]
    transfers = [tool for tool in fresh if _tool_name(tool).startswith("transfer_to_")]
    if transfers:
        asked = str(next(m for m in messages if m.get("role") == "user").get("content"))
        wanted = "transfer_to_spanish_agent" if "¿" in asked else "transfer_to_english_agent"
        fresh = [tool for tool in transfers if _tool_name(tool) == wanted]
    if fresh:
        call = {"name": _tool_name(fresh[0]), "arguments": arguments_for(fresh[0])}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
    return tool_loop(messages, None, turn)


def build_triage(data: Any) -> Agent[Any]:
    """The SDK's routing pattern: a triage agent that hands over to a language agent."""

    def language_agent(name: str, language: str) -> Agent[Any]:
        return Agent(name=name, instructions=f"You only speak {language}.", tools=[calculate])

    return Agent(
        name=TRIAGE,
        instructions="Hand off to the agent that speaks the language of the request.",
        handoffs=[language_agent(SPANISH, "Spanish"), language_agent(ENGLISH, "English")],
    )


def build_orchestrator(data: Any) -> Agent[Any]:
    """Agents as tools: the orchestrator asks the translator, then answers itself."""
    translator = Agent(name=TRANSLATOR, instructions="Translate the text to English.")
    return Agent(
        name=ORCHESTRATOR,
        instructions="Translate with the tool, then answer.",
        tools=[translator.as_tool(tool_name="translate", tool_description="Translates text.")],
    )


def reward_one(result: Any, data: Any) -> float:
    """1.0 on the final answer: what the episode returns rewards the last reply."""
    return 1.0


@pytest.fixture
async def scripted(make_proxy: Any) -> RunningProxy:
    """A proxy whose model plays each agent by `each_tool_once`."""
    running: RunningProxy = await make_proxy(each_tool_once)
    return running


async def run_links(
    proxy: RunningProxy,
    build: AgentFactory,
    api: Any,
    stream: bool = False,
    agents: list[str] | None = None,
) -> list[InteractionWithTokenLogpReward]:
    """One episode of the agent `build` makes, rewarded 1.0 on its final answer: the export
    (individual style, in the order the calls were made) of `agents` (None: all)."""
    adapter = OpenAIAgentsAdapter(build, api=api, stream=stream, reward_fn=reward_one)
    settings = WorkflowSettings(
        episodes=EpisodeConfig(discount=DISCOUNT),
        agents=None if agents is None else tuple(agents),
    )
    workflow = OpenAIProxyWorkflow(
        adapter, proxy_addr=proxy.url, admin_key=proxy.admin_key, settings=settings
    )
    try:
        episode = await workflow.run_episode(ROW)
    finally:
        await workflow.aclose()
    assert episode.error is None
    assert episode.interactions is not None
    return list(episode.interactions.values())


def tool_calls(interaction: InteractionWithTokenLogpReward) -> list[str]:
    (reply,) = interaction.output_message_list or [{}]
    return [call["function"]["name"] for call in reply.get("tool_calls") or []]


def rewards(interactions: Sequence[InteractionWithTokenLogpReward]) -> list[float | None]:
    return [interaction.reward for interaction in interactions]


@pytest.mark.parametrize(("api", "stream"), API_AND_STREAM)
async def test_a_handoff_links_the_triage_call_and_credits_it(
    scripted: RunningProxy, api: Any, stream: bool
) -> None:
    triage, spanish, answer = await run_links(scripted, build_triage, api, stream)
    assert tool_calls(triage) == ["transfer_to_spanish_agent"]
    assert tool_calls(spanish) == ["calculate"]
    assert answer.output_text == FINAL_ANSWER
    assert [i.link for i in (triage, spanish, answer)] == [Link.ROOT, Link.HANDOFF, Link.PREFIX]
    assert [i.parent_id for i in (triage, spanish, answer)] == [
        None,
        triage.interaction_id,
        spanish.interaction_id,
    ]
    assert [i.agent_id for i in (triage, spanish, answer)] == [TRIAGE, SPANISH, SPANISH]
    # A chain triage -> Spanish agent -> answer: 0.9**2, 0.9, 1.0 (every link factor 1.0).
    assert rewards((triage, spanish, answer)) == pytest.approx([0.81, 0.9, 1.0])


@pytest.mark.parametrize(("api", "stream"), API_AND_STREAM)
async def test_an_agent_as_tool_is_a_subagent_of_the_call_that_opened_it(
    scripted: RunningProxy, api: Any, stream: bool
) -> None:
    opening, translation, answer = await run_links(scripted, build_orchestrator, api, stream)
    assert tool_calls(opening) == ["translate"]
    assert translation.output_text.startswith("Turn 0: you said: ")
    assert answer.output_text == f"{FINAL_PREFIX} {translation.output_text}"
    links = [i.link for i in (opening, translation, answer)]
    assert links == [Link.ROOT, Link.SUBAGENT, Link.PREFIX]
    assert translation.parent_id == answer.parent_id == opening.interaction_id
    assert [i.agent_id for i in (opening, translation, answer)] == [
        ORCHESTRATOR,
        TRANSLATOR,
        ORCHESTRATOR,
    ]
    # The translation is the tool result the orchestrator's answer (1.0) goes on with: both the
    # opening call (by its continuation) and the translation (by its anchor's) get 0.9.
    assert rewards((opening, translation, answer)) == pytest.approx([DISCOUNT, DISCOUNT, 1.0])


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_an_export_of_some_agents_keeps_the_whole_trees_rewards(
    scripted: RunningProxy, api: Any
) -> None:
    (triage,) = await run_links(scripted, build_triage, api, agents=[TRIAGE])
    assert (triage.agent_id, triage.link, tool_calls(triage)) == (
        TRIAGE,
        Link.ROOT,
        ["transfer_to_spanish_agent"],
    )
    assert triage.reward == pytest.approx(DISCOUNT**2)  # its own subtree alone would give 0
    opening, answer = await run_links(scripted, build_orchestrator, api, agents=[ORCHESTRATOR])
    assert [i.agent_id for i in (opening, answer)] == [ORCHESTRATOR, ORCHESTRATOR]
    assert answer.parent_id == opening.interaction_id
    assert rewards((opening, answer)) == pytest.approx([DISCOUNT, 1.0])
    (translation,) = await run_links(scripted, build_orchestrator, api, agents=[TRANSLATOR])
    # Its own subtree alone would give 0: the credit comes from the answer its result fed.
    assert (translation.link, translation.reward) == (Link.SUBAGENT, pytest.approx(DISCOUNT))
    assert translation.parent_id is not None  # its parent was not exported, but is named


async def test_a_filter_and_an_agent_header_of_your_own_are_kept(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    seen: list[str] = []

    def brief(data: CallModelData[Any]) -> ModelInputData:
        seen.append(data.agent.name)
        instructions = f"{data.model_data.instructions} Be brief."
        return ModelInputData(input=data.model_data.input, instructions=instructions)

    model = proxy_model(proxy_client(Connection(proxy.base_url, key, proxy.http)))
    run_config = proxy_run_config(model, call_model_input_filter=brief)
    own_header = ModelSettings(extra_headers={"X-Rltap-Agent": "my id"})
    for agent in (
        Agent(name="named", instructions="Answer.", model_settings=own_header),
        Agent(name="plain", instructions="Answer."),
        Agent(name="Agente español", instructions="Answer."),  # percent-encoded in the header
    ):
        await Runner.run(agent, "hi", run_config=run_config)
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    interactions = (await proxy.export(session_id))["interactions"]
    assert seen == ["named", "plain", "Agente español"]
    assert [item["agent_id"] for item in interactions] == ["my id", "plain", "Agente español"]
    assert [item["messages"][0]["content"] for item in interactions] == ["Answer. Be brief."] * 3
