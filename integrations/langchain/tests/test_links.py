"""How a LangChain agent's calls are linked when it rewrites its history or drops its tools.

Real `create_agent` agents through the real proxy (scripted engine), asserting the export's
link kinds, agent ids and discounted rewards (`rltap.tree.links`, `rltap.tree.rewards`). The reward
1.0 is set on the final answer and discounted by 0.9 along every link, with the default mean over a
node's children.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    SummarizationMiddleware,
    before_model,
)
from langchain_core.messages import RemoveMessage, ToolMessage, trim_messages
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime
from lc_builders import QUESTION, TOOL_RESULT, agent_input, calculator

from rltap.adapter import AgentAdapter, Api
from rltap.testing import RunningProxy
from rltap.testing.harness import ProxyFactory
from rltap.testing.scripts import FINAL_PREFIX
from rltap.tree.links import AGENT_HEADER, agent_from_header
from rltap_langchain import LangChainAdapter

# c1..c4 are the agent's calls, s1 and s2 the middleware's summaries: c1 root, c2 prefix of c1,
# s1 subagent of c2, c3 rewrite of c2, s2 subagent of c3, c4 rewrite of c3, when the adapter names
# the agent (`<name>/summarization`: a helper of the agent whose tool call is open).
SUMMARIZED_LINKS = ["root", "prefix", "subagent", "rewrite", "subagent", "rewrite"]
# Unnamed, a summary is a sub-agent only when it holds what the open tool call was given: s1
# summarizes c2's call `lookup(step=2)`, s2 only the older turns (c3's call `lookup(step=3)` is
# kept, not summarized) and s1's summary, which it carries: s2 is a `carry` of s1.
UNNAMED_SUMMARIZED_LINKS = ["root", "prefix", "subagent", "rewrite", "carry", "rewrite"]
DISCOUNT = 0.9
STEPS = 3
SUMMARY = "Summary: the user wants the facts; the first ones are known."
SUMMARY_PROMPT = "Summarize this conversation:\n{messages}"
# What SummarizationMiddleware puts in front of the kept messages.
SUMMARY_MESSAGE = f"Here is a summary of the conversation to date:\n\n{SUMMARY}"


@tool
def lookup(step: int) -> str:
    """Look up the fact of one step."""
    return f"fact {step}"


def _call(step: int) -> str:
    call = json.dumps({"name": "lookup", "arguments": {"step": step}})
    return f"<tool_call>\n{call}\n</tool_call>"


def lookup_steps(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """Looks up facts 1..STEPS one call at a time, then answers; without tools (the summary
    call) it writes the summary. Reads the last tool result, not the turn: a summary changes
    how many turns the history shows."""
    if not tools:
        return SUMMARY
    last = messages[-1]
    if last.get("role") != "tool":
        return _call(1)
    step = int(str(last["content"]).removeprefix("fact "))
    return _call(step + 1) if step < STEPS else f"{FINAL_PREFIX} {last['content']}"


def build_summarizing_agent(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """A tool agent whose history is summarized once it holds 5 messages, keeping the last 2
    (the latest tool call and its result): before the 3rd and 4th model calls. Named when the
    row gives a name."""
    summarize = SummarizationMiddleware(
        llm, trigger=("messages", 5), keep=("messages", 2), summary_prompt=SUMMARY_PROMPT
    )
    return create_agent(
        llm,
        tools=[lookup],
        system_prompt="Look the facts up.",
        middleware=[summarize],
        name=data.get("name"),
    )


class AnswerWithoutTools(AgentMiddleware):
    """Offers no tools once a tool has answered: LangChain's dynamic-tools pattern
    (`wrap_model_call` overriding the request's tools) for a final call that must answer."""

    @staticmethod
    def _final(request: ModelRequest) -> ModelRequest:
        if any(isinstance(message, ToolMessage) for message in request.messages):
            return request.override(tools=[])
        return request

    def wrap_model_call(self, request: ModelRequest, handler: Callable[..., Any]) -> Any:
        return handler(self._final(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[..., Awaitable[Any]]
    ) -> Any:
        return await handler(self._final(request))


def build_answering_agent(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """The calculator agent answering without tools after its tool call (named when the row
    gives a name)."""
    return create_agent(
        llm,
        tools=[calculator],
        system_prompt="Use the calculator.",
        middleware=[AnswerWithoutTools()],
        name=data.get("name"),
    )


USER_TURNS = ["first question", "second question", "third question"]


@before_model
def keep_last_exchange(state: AgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
    """Short-term memory: the history is trimmed to its last 3 messages, starting on a user
    message, before each model call (`trim_messages` counting messages)."""
    kept = trim_messages(
        state["messages"], max_tokens=3, token_counter=len, strategy="last", start_on="human"
    )
    if len(kept) == len(state["messages"]):
        return None
    return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept]}


def build_trimming_chat(llm: ChatOpenAI, data: Any) -> Runnable[Any, Any]:
    """Three user turns with one `create_agent` through a checkpointer (one thread)."""
    agent = create_agent(
        llm, system_prompt="Chat.", middleware=[keep_last_exchange], checkpointer=InMemorySaver()
    )

    async def converse(turns: list[str]) -> Any:
        thread = {"configurable": {"thread_id": "episode"}}
        state = None
        for turn in turns:
            state = await agent.ainvoke({"messages": [{"role": "user", "content": turn}]}, thread)
        return state

    return RunnableLambda(converse)


async def run_rewarded(
    proxy: RunningProxy, adapter: AgentAdapter, data: Any
) -> tuple[list[dict[str, Any]], list[httpx.Request]]:
    """Run one episode, reward its last reply 1.0, export it discounted by DISCOUNT; returns
    the exported interactions and the HTTP requests the agent sent."""
    sent: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        sent.append(request)

    session_id, key = await proxy.start_session()
    async with httpx.AsyncClient(timeout=120, event_hooks={"request": [record]}) as client:
        await adapter.run(data, base_url=proxy.base_url, api_key=key, http_client=client)
    rewarded = await proxy.session_post(key, "/rl/set_reward", {"reward": 1.0})
    assert rewarded.status_code == 200, rewarded.text
    ended = await proxy.session_post(key, "/rl/end_session")
    assert ended.status_code == 200, ended.text
    export = await proxy.export(session_id, discount=DISCOUNT)
    return export["interactions"], sent


# The summarizing episode's calls in the order they were made: the agent's c1..c4 and the
# middleware's summaries s1, s2.
CALLS = ["c1", "c2", "s1", "c3", "s2", "c4"]


def _named(items: list[dict[str, Any]]) -> dict[str, str]:
    """Interaction id -> its name in CALLS."""
    return {item["interaction_id"]: name for item, name in zip(items, CALLS, strict=True)}


async def test_summarized_history_links_as_rewrite_and_summaries_by_what_they_hold(
    make_proxy: ProxyFactory,
) -> None:
    proxy = await make_proxy(lookup_steps)
    adapter = LangChainAdapter(build_summarizing_agent, input_fn=agent_input)
    items, sent = await run_rewarded(proxy, adapter, {"question": QUESTION})

    # c1..c4 are the agent's calls, s1 and s2 the middleware's summaries (no tools, one user
    # message), each made before the next agent call, while the last tool call is still open.
    c1, _, s1, c3, s2, c4 = items
    assert [i["link"] for i in items] == UNNAMED_SUMMARIZED_LINKS
    names = _named(items)
    assert [names.get(i["parent_id"]) for i in items] == [None, "c1", "c2", "c2", "s1", "c3"]
    for summary in (s1, s2):
        (prompt,) = summary["messages"]
        assert prompt["role"] == "user"
        assert prompt["content"].startswith("Summarize this")
        assert summary["output_text"] == SUMMARY
    # After the summary the agent's history is the summary plus the call it kept (c2's, then
    # c3's reply and its tool result): the rewrite hangs off the call whose reply it kept.
    for call, kept_step in ((c3, 2), (c4, 3)):
        system, summary_message, reply, result = call["messages"]
        assert (system["role"], summary_message["content"]) == ("system", SUMMARY_MESSAGE)
        (tool_call,) = reply["tool_calls"]
        assert json.loads(tool_call["function"]["arguments"]) == {"step": kept_step}
        assert (result["role"], result["content"]) == ("tool", f"fact {kept_step}")
    assert c4["output_text"] == f"{FINAL_PREFIX} fact {STEPS}"

    # No agent is named: the proxy derives one from the system prompt and tools, the same for
    # every agent call (a rewrite keeps its parent's), another for the tool-less summaries.
    assert AGENT_HEADER not in {key.lower() for request in sent for key in request.headers}
    agent, summarizer = c1["agent_id"], s1["agent_id"]
    assert [i["agent_id"] for i in items] == [agent, agent, summarizer, agent, summarizer, agent]
    assert agent != summarizer
    assert agent.startswith("agent-")
    assert summarizer.startswith("agent-")

    # s1 is not a continuation of c2: each agent call's credit comes from the agent call that
    # goes on (the rewrite). s2 continues s1, and nothing continues s2: it gets what its anchor
    # (c2, whose tool call s1 answered) goes on with, discounted once more, and s1 gets s2's
    # discounted (`rltap.tree.rewards`).
    expected = {"c4": 1.0}
    expected["c3"] = DISCOUNT * expected["c4"]  # 0.9
    expected["c2"] = expected["s2"] = DISCOUNT * expected["c3"]  # 0.81
    expected["c1"] = expected["s1"] = DISCOUNT * expected["c2"]  # 0.729
    assert {names[i["interaction_id"]]: i["reward"] for i in items} == pytest.approx(expected)


async def test_trimmed_history_links_as_rewrite_to_the_reply_it_kept(proxy: RunningProxy) -> None:
    adapter = LangChainAdapter(build_trimming_chat)
    items, _ = await run_rewarded(proxy, adapter, USER_TURNS)

    first, second, third = items
    # The 3rd call's history lost the 1st exchange: it keeps the 2nd reply, so it rewrites the
    # 2nd call (not a root, not a prefix: its messages do not start with the 2nd call's).
    assert [m["content"] for m in third["messages"]] == [
        "Chat.",
        USER_TURNS[1],
        second["output_text"],
        USER_TURNS[2],
    ]
    assert [(i["link"], i["parent_id"]) for i in items] == [
        ("root", None),
        ("prefix", first["interaction_id"]),
        ("rewrite", second["interaction_id"]),
    ]
    assert len({i["agent_id"] for i in items}) == 1
    assert first["agent_id"].startswith("agent-")
    assert [i["reward"] for i in items] == pytest.approx([DISCOUNT**2, DISCOUNT, 1.0])


@pytest.mark.parametrize(
    ("sync", "stream", "name"),
    [
        pytest.param(False, False, "math", id="ainvoke"),
        pytest.param(True, False, "math", id="invoke"),
        # Not ASCII: it travels percent-encoded, the proxy decodes it.
        pytest.param(False, True, "mathématiques 数学", id="ainvoke-sse-unicode"),
    ],
)
async def test_named_agent_names_its_calls_and_its_middleware_calls(
    make_proxy: ProxyFactory, sync: bool, stream: bool, name: str
) -> None:
    proxy = await make_proxy(lookup_steps)
    adapter = LangChainAdapter(
        build_summarizing_agent, sync=sync, stream=stream, input_fn=agent_input
    )
    items, sent = await run_rewarded(proxy, adapter, {"question": QUESTION, "name": name})

    helper = f"{name}/summarization"
    names = [name, name, helper, name, helper, name]
    assert [i["agent_id"] for i in items] == names
    # `invoke` sends through the adapter's own sync client, which the test does not see.
    headers = [request.headers[AGENT_HEADER] for request in sent]
    assert [agent_from_header(value) for value in headers] == ([] if sync else names)
    # A named create_agent stamps its name on the replies it sends back; they still link as the
    # unnamed agent's do (the canonical form ignores an assistant's name), and each summary is a
    # helper of another agent, made while the agent's tool call is open.
    assert [i["link"] for i in items] == SUMMARIZED_LINKS
    assert any(m.get("name") == name for m in items[1]["messages"] if m["role"] == "assistant")
    labels = _named(items)
    assert [labels.get(i["parent_id"]) for i in items] == [None, "c1", "c2", "c2", "c3", "c3"]
    rewards = {labels[i["interaction_id"]]: i["reward"] for i in items}
    assert rewards == pytest.approx(
        {"c1": 0.729, "c2": 0.81, "s1": 0.81, "c3": 0.9, "s2": 0.9, "c4": 1.0}
    )


async def test_an_agent_header_the_user_sets_wins(proxy: RunningProxy) -> None:
    adapter = LangChainAdapter(
        build_answering_agent,
        input_fn=agent_input,
        chat_kwargs={"default_headers": {"X-Rltap-Agent": "solver"}},
    )
    items, sent = await run_rewarded(proxy, adapter, {"question": QUESTION, "name": "math"})
    assert [request.headers.get_list(AGENT_HEADER) for request in sent] == [["solver"]] * 2
    assert [i["agent_id"] for i in items] == ["solver"] * 2


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_final_answer_without_tools_is_a_rewrite(proxy: RunningProxy, api: Api) -> None:
    adapter = LangChainAdapter(build_answering_agent, api=api, input_fn=agent_input)
    items, sent = await run_rewarded(proxy, adapter, {"question": QUESTION})

    first, final = items
    bodies = [json.loads(request.content) for request in sent]
    assert [bool(body.get("tools")) for body in bodies] == [True, False]
    assert final["output_text"] == f"{FINAL_PREFIX} {TOOL_RESULT}"
    # Other tools, same conversation: a rewrite of the call whose tool call it answers, by the
    # same (derived) agent.
    assert (first["link"], first["parent_id"]) == ("root", None)
    assert (final["link"], final["parent_id"]) == ("rewrite", first["interaction_id"])
    assert final["agent_id"] == first["agent_id"]
    assert first["agent_id"].startswith("agent-")
    assert [i["reward"] for i in items] == pytest.approx([DISCOUNT * 1.0, 1.0])
