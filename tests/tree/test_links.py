"""How calls are linked (`rltap.tree.links`): one test per rule, the agent ids, and what the links
do to rewards and to the concat export."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rltap.record.errors import InvalidRequest
from rltap.record.types import InteractionWithTokenLogpReward, Link, ModelResponse
from rltap.tree.cache import InteractionCache
from rltap.tree.canonical import tools_context
from rltap.tree.links import agent_from_header, agent_header_value, derive_agent_id

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
OTHER_TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {}}}]


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def tool_call(name: str, call_id: str = "call_1") -> dict[str, Any]:
    function = {"name": name, "arguments": "{}"}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "function": function}],
    }


def tool_result(text: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


class Episode:
    """Calls recorded complete in one cache, each with its own prompt tokens (concat style along
    prefix links: a prefix child's prompt starts with its parent's tokens)."""

    def __init__(self) -> None:
        self.cache = InteractionCache()
        self._next_token = 100

    def call(
        self,
        messages: list[dict[str, Any]],
        output: dict[str, Any],
        *,
        tools: list[dict[str, Any]] | None = None,
        agent: str | None = None,
        reward: float | None = None,
    ) -> InteractionWithTokenLogpReward:
        node = InteractionWithTokenLogpReward(messages=messages, tools=tools)
        self.cache.add(node, context=tools_context(tools), agent=agent)
        parent = node.token_parent
        prefix: list[int] = []
        if parent is not None and parent.model_response is not None:
            prefix = parent.model_response.input_tokens + parent.model_response.output_tokens
        self._next_token += 3
        response = ModelResponse(
            input_tokens=[*prefix, self._next_token],
            output_tokens=[self._next_token + 1, self._next_token + 2],
            output_logprobs=[-0.5, -0.25],
            output_versions=[1, 1],
        )
        self.cache.complete(node.interaction_id, response, [output])
        if reward is not None:
            self.cache.set_reward(node.interaction_id, reward)
        return node


# --- the rules, one by one -----------------------------------------------------------------


def test_a_continuation_with_the_same_tools_is_a_prefix_link() -> None:
    episode = Episode()
    first = episode.call([system("S"), user("2+3?")], tool_call("add"), tools=TOOLS)
    history = [system("S"), user("2+3?"), tool_call("add"), tool_result("5")]
    second = episode.call(history, reply("5"), tools=TOOLS)
    assert (first.link, second.link, second.parent) == (Link.ROOT, Link.PREFIX, first)
    assert second.agent_id == first.agent_id


def test_a_last_call_without_tools_is_a_rewrite_of_the_same_agent() -> None:
    episode = Episode()
    first = episode.call([system("S"), user("2+3?")], tool_call("add"), tools=TOOLS)
    history = [system("S"), user("2+3?"), tool_call("add"), tool_result("5")]
    last = episode.call(history, reply("5"))
    assert (last.parent, last.link) == (first, Link.REWRITE)
    assert (
        last.agent_id == first.agent_id
    )  # kept, though the tool set (and so the derivation) changed
    assert derive_agent_id(history, None) != first.agent_id


def test_a_trimmed_history_is_a_rewrite_of_the_call_whose_reply_it_kept() -> None:
    episode = Episode()
    turns = [system("S"), user("q1")]
    a = episode.call(turns, reply("a1"))
    turns += [reply("a1"), user("q2")]
    b = episode.call(turns, reply("a2"))
    # A window of the last two messages: the first turn fell out.
    trimmed = [system("S"), reply("a2"), user("q3")]
    c = episode.call(trimmed, reply("a3"))
    assert (b.parent, b.link) == (a, Link.PREFIX)
    assert (c.parent, c.link, c.agent_id) == (b, Link.REWRITE, a.agent_id)


def test_a_summarized_history_links_to_the_reply_it_kept_even_when_older_replies_also_remain() -> (
    None
):
    episode = Episode()
    a = episode.call([system("S"), user("q1")], reply("a1"))
    b = episode.call([system("S"), user("q1"), reply("a1"), user("q2")], reply("a2"))
    summarized = [system("S"), user("Summary: q1, a1"), reply("a1"), user("q2"), reply("a2")]
    c = episode.call([*summarized, user("q3")], reply("a3"))
    assert (a.link, b.parent, c.parent, c.link) == (Link.ROOT, a, b, Link.REWRITE)


def test_another_system_prompt_carrying_the_conversation_is_a_handoff() -> None:
    episode = Episode()
    triage = episode.call([system("Triage."), user("hola")], tool_call("transfer_to_spanish"))
    history = [user("hola"), tool_call("transfer_to_spanish"), tool_result("{}")]
    spanish = episode.call([system("Spanish."), *history], reply("¡Hola!"))
    assert (spanish.parent, spanish.link) == (triage, Link.HANDOFF)
    assert spanish.agent_id == derive_agent_id([system("Spanish.")], None) != triage.agent_id


def test_the_agent_header_decides_between_handoff_and_rewrite() -> None:
    episode = Episode()
    first = episode.call([system("S1"), user("q")], tool_call("t"), agent="planner")
    history = [user("q"), tool_call("t"), tool_result("ok")]
    # The same named agent with new instructions: a rewrite; another named agent: a handoff.
    same = episode.call([system("S2"), *history], reply("a"), agent="planner")
    other = episode.call([system("S1"), *history], reply("b"), agent="writer")
    assert (same.link, same.agent_id) == (Link.REWRITE, "planner")
    assert (other.link, other.agent_id, other.parent) == (Link.HANDOFF, "writer", first)


def test_an_exact_continuation_by_another_named_agent_is_a_handoff_not_a_prefix() -> None:
    episode = Episode()
    first = episode.call([user("q")], reply("a"), agent="one")
    second = episode.call([user("q"), reply("a"), user("next")], reply("b"), agent="two")
    assert (second.parent, second.link, second.token_parent) == (first, Link.HANDOFF, None)


def test_a_call_of_another_agent_while_a_tool_call_is_open_is_a_subagent() -> None:
    episode = Episode()
    orchestrator = episode.call(
        [system("Orchestrate."), user("translate hi")], tool_call("translator"), tools=TOOLS
    )
    sub = episode.call([system("Translate."), user("hi")], reply("hola"))
    done = episode.call(
        [
            system("Orchestrate."),
            user("translate hi"),
            tool_call("translator"),
            tool_result("hola"),
        ],
        reply("hola"),
        tools=TOOLS,
    )
    assert (sub.parent, sub.link) == (orchestrator, Link.SUBAGENT)
    assert (done.parent, done.link) == (orchestrator, Link.PREFIX)
    # Once continued the tool call is closed: a new conversation after it is a root.
    later = episode.call([system("Translate."), user("bye")], reply("adiós"))
    assert (later.parent, later.link) == (None, Link.ROOT)


def test_the_same_agent_starting_over_during_its_own_tool_call_is_a_root() -> None:
    episode = Episode()
    episode.call([system("S"), user("q")], tool_call("add"), tools=TOOLS)
    again = episode.call([system("S"), user("another question")], reply("a"), tools=TOOLS)
    assert (again.parent, again.link) == (None, Link.ROOT)


def test_a_tool_call_left_unanswered_is_closed_once_the_session_moves_on() -> None:
    # The orchestrator's tool call is never answered (its run ended on the call); another
    # conversation goes on, then a structured-output call of another agent comes: it is no
    # sub-agent of that stale tool call.
    episode = Episode()
    earlier = episode.call([system("Chat."), user("hi")], reply("hello"))
    episode.call([system("Orchestrate."), user("go")], tool_call("translator"), tools=TOOLS)
    moved_on = episode.call(
        [system("Chat."), user("hi"), reply("hello"), user("more")], reply("sure")
    )
    extract = episode.call([system("Extract JSON."), user("a: 1")], reply('{"a":1}'))
    assert (moved_on.parent, moved_on.link) == (earlier, Link.PREFIX)
    assert (extract.parent, extract.link) == (None, Link.ROOT)


def test_a_tool_call_is_closed_when_its_agent_starts_over() -> None:
    episode = Episode()
    episode.call([system("S"), user("q")], tool_call("add"), tools=TOOLS)
    episode.call([system("S"), user("another question")], reply("a"), tools=TOOLS)  # a root
    helper = episode.call([system("Summarise."), user("notes")], reply("short"))
    assert (helper.parent, helper.link) == (None, Link.ROOT)


def test_a_sub_agents_own_calls_keep_the_outer_tool_call_open() -> None:
    episode = Episode()
    outer = episode.call([system("Orchestrate."), user("go")], tool_call("research"), tools=TOOLS)
    research = [system("Research."), user("go")]
    sub = episode.call(research, tool_call("search", "call_2"), tools=OTHER_TOOLS)
    deeper = episode.call([system("Search."), user("go")], reply("found"))
    sub_done = episode.call(
        [*research, tool_call("search", "call_2"), tool_result("found", "call_2")],
        reply("report"),
        tools=OTHER_TOOLS,
    )
    second = episode.call([system("Review."), user("report")], reply("fine"))
    assert [(n.parent, n.link) for n in (sub, deeper, sub_done, second)] == [
        (outer, Link.SUBAGENT),
        (sub, Link.SUBAGENT),
        (sub, Link.PREFIX),
        (outer, Link.SUBAGENT),
    ]


def test_a_call_that_shares_nothing_is_a_root() -> None:
    episode = Episode()
    episode.call([user("q")], reply("a"))
    other = episode.call([user("unrelated")], reply("b"))
    assert (other.parent, other.link) == (None, Link.ROOT)


# --- agent ids -------------------------------------------------------------------------------


def test_derived_agent_ids_follow_the_system_prompt_and_the_tools() -> None:
    base = derive_agent_id([system("S"), user("x")], tools_context(TOOLS))
    assert base == derive_agent_id([system("S"), user("another")], tools_context(TOOLS))
    assert base != derive_agent_id([system("S"), user("x")], tools_context(OTHER_TOOLS))
    assert base != derive_agent_id([system("T"), user("x")], tools_context(TOOLS))
    assert base.startswith("agent-")
    assert len(base) == len("agent-") + 12


@pytest.mark.parametrize("value", ["", "   ", "x" * 257])
def test_an_empty_or_overlong_agent_header_is_refused(value: str) -> None:
    with pytest.raises(InvalidRequest, match="X-Rltap-Agent"):
        agent_from_header(value)


def test_the_agent_header_is_stripped() -> None:
    assert agent_from_header("  triage ") == "triage"
    assert agent_from_header(None) is None


@pytest.mark.parametrize("name", ["Triage agent", "Español", "计算器", "50% off", "tab\there"])
def test_any_agent_name_round_trips_through_the_header(name: str) -> None:
    value = agent_header_value(name)
    assert value is not None
    assert value.isascii()
    assert value.isprintable()
    assert agent_from_header(value) == name


def test_blank_or_overlong_names_name_nobody() -> None:
    assert agent_header_value("  ") is None
    assert agent_header_value("x" * 257) is None
    with pytest.raises(InvalidRequest, match="UTF-8"):
        agent_from_header("%ff")


# --- rewards and exports ---------------------------------------------------------------------


def handoff_episode() -> tuple[Episode, list[InteractionWithTokenLogpReward]]:
    """triage -> (handoff) spanish agent's tool call -> its answer, rewarded 1.0."""
    episode = Episode()
    triage = episode.call([system("Triage."), user("hola")], tool_call("transfer_to_spanish"))
    history = [
        system("Spanish."),
        user("hola"),
        tool_call("transfer_to_spanish"),
        tool_result("{}"),
    ]
    spanish = episode.call(history, tool_call("lookup", "call_2"), tools=TOOLS)
    history += [tool_call("lookup", "call_2"), tool_result("hola", "call_2")]
    answer = episode.call(history, reply("¡Hola!"), tools=TOOLS, reward=1.0)
    return episode, [triage, spanish, answer]


def test_a_handoff_episode_gives_the_triage_call_its_discounted_credit() -> None:
    episode, (triage, spanish, answer) = handoff_episode()
    assert [n.link for n in (triage, spanish, answer)] == [Link.ROOT, Link.HANDOFF, Link.PREFIX]
    rewards = episode.cache.apply_reward_discount(0.9)
    assert rewards[answer.interaction_id] == pytest.approx(1.0)
    assert rewards[spanish.interaction_id] == pytest.approx(0.9)
    assert rewards[triage.interaction_id] == pytest.approx(0.81)


def test_each_link_kind_has_its_own_factor() -> None:
    episode, (triage, spanish, _) = handoff_episode()
    rewards = episode.cache.apply_reward_discount(0.9, link_factors={"handoff": 0.5})
    assert rewards[spanish.interaction_id] == pytest.approx(0.9)
    assert rewards[triage.interaction_id] == pytest.approx(0.9 * 0.5 * 0.9)


@pytest.mark.parametrize(
    ("factors", "message"),
    [({"root": 1.0}, "key must be one of"), ({"handoff": 1.5}, r"in \[0, 1\]")],
)
def test_bad_link_factors_are_refused(factors: dict[str, float], message: str) -> None:
    episode, _ = handoff_episode()
    with pytest.raises(InvalidRequest, match=message):
        episode.cache.export_interactions(link_factors=factors)


def test_concat_starts_a_new_sequence_at_a_link_that_is_not_a_prefix() -> None:
    episode, (triage, spanish, answer) = handoff_episode()
    exported = episode.cache.export_interactions("concat", reward_discount=0.9)
    # The triage call is a sequence of its own; the spanish agent's two calls join.
    assert list(exported) == [triage.interaction_id, answer.interaction_id]
    assert answer.model_response is not None
    assert spanish.model_response is not None
    joined = exported[answer.interaction_id].to_arrays()["input_ids"][0].tolist()
    assert joined == answer.model_response.input_tokens + answer.model_response.output_tokens
    assert joined[: spanish.model_response.input_len] == spanish.model_response.input_tokens
    assert exported[triage.interaction_id].reward == pytest.approx(0.81)
    assert exported[answer.interaction_id].parent_id == spanish.interaction_id


def test_an_export_limited_to_some_agents_keeps_the_credit_of_the_others() -> None:
    episode, (triage, spanish, answer) = handoff_episode()
    exported = episode.cache.export_interactions(reward_discount=0.9, agents=[triage.agent_id])
    assert list(exported) == [triage.interaction_id]
    assert exported[triage.interaction_id].reward == pytest.approx(0.81)
    assert spanish.agent_id == answer.agent_id != triage.agent_id


def readme_trees() -> dict[str, tuple[Episode, list[InteractionWithTokenLogpReward]]]:
    """The trees drawn in docs/recording.md's "How calls are linked", each with its last call
    rewarded."""
    trees = {}
    episode = Episode()
    a = episode.call([system("sys"), user("q1")], reply("a1"))
    b = episode.call([system("sys"), user("q1"), reply("a1"), user("q2")], reply("a2"))
    history = [system("sys"), user("q1"), reply("a1"), user("q2"), reply("a2"), user("q3")]
    c = episode.call(history, reply("a3"), reward=1.0)
    trees["prefix"] = episode, [a, b, c]
    episode = Episode()
    a = episode.call([system("sys"), user("q")], tool_call("add"), tools=TOOLS)
    history = [system("sys"), user("q"), tool_call("add"), tool_result("4")]
    trees["rewrite: last call without tools"] = (
        episode,
        [a, episode.call(history, reply("4"), reward=1.0)],
    )
    episode = Episode()
    a = episode.call([system("sys"), user("q1")], reply("a1"))
    b = episode.call([system("sys"), user("q1"), reply("a1"), user("q2")], reply("a2"))
    c = episode.call([system("sys"), reply("a2"), user("q3")], reply("a3"), reward=1.0)
    trees["rewrite: trimmed window"] = episode, [a, b, c]
    trees["handoff"] = handoff_episode()
    episode = Episode()
    o1 = episode.call([system("Orchestrate"), user("hi")], tool_call("translator"), tools=TOOLS)
    sub = episode.call([system("Translate"), user("hi")], reply("hola"))
    history = [system("Orchestrate"), user("hi"), tool_call("translator"), tool_result("hola")]
    o2 = episode.call(history, reply("answer"), tools=TOOLS, reward=1.0)
    trees["subagent"] = episode, [o1, sub, o2]
    trees["carry: group chat"] = group_chat_episode()
    return trees


README_REWARDS = {
    "prefix": ([Link.ROOT, Link.PREFIX, Link.PREFIX], [0.81, 0.9, 1.0]),
    "rewrite: last call without tools": ([Link.ROOT, Link.REWRITE], [0.9, 1.0]),
    "rewrite: trimmed window": ([Link.ROOT, Link.PREFIX, Link.REWRITE], [0.81, 0.9, 1.0]),
    "handoff": ([Link.ROOT, Link.HANDOFF, Link.PREFIX], [0.81, 0.9, 1.0]),
    "subagent": ([Link.ROOT, Link.SUBAGENT, Link.PREFIX], [0.9, 0.9, 1.0]),
    "carry: group chat": ([Link.ROOT, *[Link.CARRY] * 3], [0.729, 0.81, 0.9, 1.0]),
}


@pytest.mark.parametrize("tree", list(README_REWARDS))
def test_the_readme_trees_get_the_rewards_the_readme_draws(tree: str) -> None:
    episode, nodes = readme_trees()[tree]
    links, rewards = README_REWARDS[tree]
    discounted = episode.cache.apply_reward_discount(0.9)
    assert [node.link for node in nodes] == links
    assert [discounted[node.interaction_id] for node in nodes] == pytest.approx(rewards)


def test_a_sub_agent_s_calls_get_the_credit_of_the_continuation_its_answer_feeds() -> None:
    episode = Episode()
    o1 = episode.call([system("Orchestrate"), user("hi")], tool_call("translator"), tools=TOOLS)
    s1 = episode.call([system("Translate"), user("hi")], tool_call("lookup"), tools=OTHER_TOOLS)
    history = [system("Translate"), user("hi"), tool_call("lookup"), tool_result("hola")]
    s2 = episode.call(history, reply("hola"), tools=OTHER_TOOLS, reward=0.25)
    history = [system("Orchestrate"), user("hi"), tool_call("translator"), tool_result("hola")]
    o2 = episode.call(history, reply("answer"), tools=TOOLS, reward=1.0)
    assert [n.link for n in (o1, s1, s2, o2)] == [
        Link.ROOT,
        Link.SUBAGENT,
        Link.PREFIX,
        Link.PREFIX,
    ]
    for factor in (1.0, 0.5):
        rewards = episode.cache.apply_reward_discount(0.9, link_factors={"subagent": factor})
        # The sub-agent's own reward stays in its calls; the orchestrator's comes from O2.
        assert rewards[o1.interaction_id] == pytest.approx(0.9)
        assert rewards[s2.interaction_id] == pytest.approx(0.25 + 0.9 * factor)
        assert rewards[s1.interaction_id] == pytest.approx(0.9 * (0.25 + 0.9 * factor))


def test_a_sub_agent_whose_caller_never_went_on_gets_its_own_reward_only() -> None:
    episode = Episode()
    episode.call([system("Orchestrate"), user("hi")], tool_call("translator"), tools=TOOLS)
    sub = episode.call([system("Translate"), user("hi")], reply("hola"), reward=0.5)
    assert episode.cache.apply_reward_discount(0.9)[sub.interaction_id] == pytest.approx(0.5)


def drawn_trees() -> dict[str, tuple[list[str], list[float]]]:
    """docs/recording.md's `tree` block: each tree's title, its children's link words, every
    reward."""
    page = (Path(__file__).parents[2] / "docs/recording.md").read_text()
    [block] = re.findall(r"```tree\n(.*?)```", page, re.DOTALL)
    trees = {}
    for drawing in block.strip().split("\n\n"):
        title, *lines = drawing.splitlines()
        links = [re.search(r"[└├] (\w+)", line)[1] for line in lines[1:]]  # type: ignore[index]
        trees[title] = links, [float(line.split()[-1]) for line in lines]
    return trees


def test_the_docs_draw_the_trees_test_links_builds() -> None:
    expected = {
        title: ([str(link) for link in links[1:]], rewards)
        for title, (links, rewards) in README_REWARDS.items()
    }
    assert drawn_trees() == expected


# Rule 4, `carry`: a reply carried forward in another form.

THOUGHT = "I will add the two numbers with the add tool and report the sum."


def test_a_reply_sent_back_with_text_appended_is_carried() -> None:
    # smolagents' CodeAgent: its reply comes back with the stop string and its tool calls.
    episode = Episode()
    first = episode.call([system("Code."), user("2 + 3?")], reply(f"Thought: {THOUGHT}\n<code>"))
    sent_back = reply(f"Thought: {THOUGHT}\n<code></code>\nCalling tools:\n[{{'id': 'x'}}]")
    history = [system("Code."), user("2 + 3?"), sent_back, user("Observation: 5")]
    second = episode.call(history, reply("5"), reward=1.0)
    assert (second.parent, second.link) == (first, Link.CARRY)
    assert second.agent_id == first.agent_id
    assert episode.cache.apply_reward_discount(0.9)[first.interaction_id] == pytest.approx(0.9)


def test_tool_calls_re_rendered_as_text_are_carried_by_their_id() -> None:
    # smolagents' ToolCallingAgent: `Calling tools:` and the call's id, the result as a user turn.
    episode = Episode()
    first = episode.call(
        [system("Tools."), user("2 + 3?")], tool_call("add", "call_9f3a"), tools=TOOLS
    )
    rendered = reply("Calling tools:\n[{'id': 'call_9f3a', 'function': {'name': 'add'}}]")
    history = [system("Tools."), user("2 + 3?"), rendered, user("Observation: 5")]
    second = episode.call(history, reply("5"), tools=TOOLS)
    assert (second.parent, second.link) == (first, Link.CARRY)


POEM = "Grey waves fold and break, salt wind carries gull voices, the tide keeps its time."
REVIEW = "The second line is strong; the last line could name the moon that pulls the tide."
POEM2 = "Grey waves fold and break under the moon."


def group_chat_episode() -> tuple[Episode, list[InteractionWithTokenLogpReward]]:
    """AutoGen's RoundRobinGroupChat: each agent's reply is relayed to the other as a named user
    message; an agent's own history is otherwise its prefix. The last call is rewarded 1.0."""
    episode = Episode()
    task = user("Write a haiku about the sea, then review it.")
    a1 = episode.call([system("Poet."), task], reply(POEM))
    b_history = [system("Critic."), task, {**user(POEM), "name": "poet"}]
    b1 = episode.call(b_history, reply(REVIEW))
    a2 = episode.call(
        [system("Poet."), task, reply(POEM), {**user(REVIEW), "name": "critic"}], reply(POEM2)
    )
    b_history = [*b_history, reply(REVIEW), {**user(POEM2), "name": "poet"}]
    b2 = episode.call(b_history, reply("APPROVE"), reward=1.0)
    return episode, [a1, b1, a2, b2]


def test_a_group_chat_round_is_one_chain() -> None:
    _, (a1, b1, a2, b2) = group_chat_episode()
    assert [(n.parent, n.link) for n in (a1, b1, a2, b2)] == [
        (None, Link.ROOT),
        (a1, Link.CARRY),
        (b1, Link.CARRY),
        (a2, Link.CARRY),
    ]


def test_a_transcript_re_rendered_into_one_message_is_carried() -> None:
    # DSPy's ReAct: each step renders the whole trajectory into one new user message.
    episode = Episode()
    step = (
        "[[ ## next_thought ## ]]\n{}\n\n[[ ## next_tool_name ## ]]\nadd\n\n[[ ## completed ## ]]"
    )
    first = episode.call([system("ReAct."), user("question: 2 + 3")], reply(step.format(THOUGHT)))
    then = "I have the sum from the tool, so the task is finished and I can answer now."
    trajectory = f"[[ ## thought_0 ## ]]\n{THOUGHT}\n\n[[ ## observation_0 ## ]]\n5"
    second = episode.call(
        [system("ReAct."), user(f"question: 2 + 3\n\ntrajectory: {trajectory}")],
        reply(step.format(then)),
    )
    trajectory += f"\n\n[[ ## thought_1 ## ]]\n{then}\n\n[[ ## observation_1 ## ]]\ndone"
    third = episode.call(
        [system("Extract."), user(f"question: 2 + 3\n\ntrajectory: {trajectory}")], reply("5")
    )
    assert [(n.parent, n.link) for n in (first, second, third)] == [
        (None, Link.ROOT),
        (first, Link.CARRY),
        (second, Link.CARRY),
    ]


def test_a_reply_that_repeats_its_question_does_not_tie_the_next_run_to_it() -> None:
    # Two independent runs of one agent: the first answer quotes the task, which the second
    # run's task repeats. Words the reply took from its own prompt carry nothing of it.
    episode = Episode()
    task = "What is the sum of 2 and 3 when you use the add tool?"
    first = episode.call([system("Math."), user(task)], reply(f"You asked: {task} It is 5."))
    second = episode.call([system("Math."), user(task)], reply("It is 5."))
    assert (first.link, second.link, second.parent) == (Link.ROOT, Link.ROOT, None)


def test_concat_does_not_join_across_a_carry() -> None:
    episode = Episode()
    first = episode.call([system("Code."), user("2 + 3?")], reply(THOUGHT))
    second = episode.call(
        [system("Code."), user("2 + 3?"), reply(f"{THOUGHT} </code>")], reply("5")
    )
    assert second.link is Link.CARRY
    exported = episode.cache.export_interactions("concat")
    assert list(exported) == [first.interaction_id, second.interaction_id]


# Rule 3: an open tool call's sub-agent is the tool's work; hand-off tools hand off.


def call_with(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "function": function}],
    }


def test_an_agent_run_as_a_tool_is_a_subagent_when_it_is_given_the_tools_input() -> None:
    episode = Episode()
    opened = episode.call(
        [system("Orchestrate."), user("Say hi in Spanish")],
        call_with("translator", '{"text": "hi there friend"}'),
        tools=TOOLS,
    )
    sub = episode.call([system("Translate."), user("hi there friend")], reply("hola amigo"))
    assert (sub.parent, sub.link) == (opened, Link.SUBAGENT)


def test_another_agents_unrelated_call_is_not_a_sub_agent_and_closes_the_tool_call() -> None:
    episode = Episode()
    episode.call(
        [system("Orchestrate."), user("Say hi in Spanish")],
        call_with("translator", '{"text": "hi there friend"}'),
        tools=TOOLS,
    )
    other = episode.call([system("Weather."), user("Rain in Paris?")], reply("No."))
    later = episode.call([system("Translate."), user("hi there friend")], reply("hola"))
    assert (other.parent, other.link) == (None, Link.ROOT)
    assert (later.parent, later.link) == (None, Link.ROOT)  # the tool call was closed


def test_an_output_tool_never_leaves_the_next_run_under_it() -> None:
    # pydantic-ai's structured output: `final_result`, which nothing answers; then the app's
    # next, unrelated run (its flight booking example) is a tree of its own.
    episode = Episode()
    first = episode.call(
        [system("Find a flight."), user("SFO to ANC on 2025-01-10")],
        call_with("final_result", '{"flight_number": "AK456"}'),
        tools=TOOLS,
    )
    second = episode.call([system("Seat preference."), user("AK456 window seat 2A")], reply("2A"))
    assert (first.link, second.parent, second.link) == (Link.ROOT, None, Link.ROOT)


def test_a_hand_off_tool_followed_by_the_other_agent_is_a_handoff() -> None:
    # AutoGen's Swarm: the next agent sees the conversation, not the hand-off call itself.
    episode = Episode()
    transfer = episode.call(
        [system("Travel agent."), user("Refund my flight")],
        call_with("transfer_to_flights_refunder", "{}"),
        tools=TOOLS,
    )
    refunder = episode.call([system("Flights refunder."), user("Refund my flight")], reply("Done."))
    assert (refunder.parent, refunder.link) == (transfer, Link.HANDOFF)


def test_another_agent_worked_for_a_call_its_agent_then_continues_is_its_sub_agent() -> None:
    # A smolagents CodeAgent manager calls its managed agent from its code (no tool call is
    # open); the managed agent carries the task its code wrote, then the manager goes on.
    episode = Episode()
    task = "Find the capital city of France and give its name"
    code = f'Thought: ask the searcher.\n<code>\nsearcher(task="{task}")\n'
    m1 = episode.call([system("Manager."), user("Capital of France?")], reply(code))
    s1 = episode.call([system("Searcher."), user(f"Task: {task}")], tool_call("lookup", "c_9"))
    s_history = [system("Searcher."), user(f"Task: {task}"), tool_call("lookup", "c_9")]
    s2 = episode.call([*s_history, tool_result("Paris", "c_9")], reply("Paris"))
    assert s1.link is Link.CARRY  # until the manager goes on
    sent_back = reply(f"{code}</code>\nCalling tools:\n[{{'name': 'python_interpreter'}}]")
    history = [
        system("Manager."),
        user("Capital of France?"),
        sent_back,
        user("Observation: Paris"),
    ]
    m2 = episode.call(history, reply("Paris"), reward=1.0)
    assert [(n.parent, n.link) for n in (m1, s1, s2, m2)] == [
        (None, Link.ROOT),
        (m1, Link.SUBAGENT),
        (s1, Link.PREFIX),
        (m1, Link.CARRY),
    ]
    rewards = episode.cache.apply_reward_discount(0.9)
    assert [rewards[n.interaction_id] for n in (m1, s1, s2, m2)] == pytest.approx(
        [0.9, 0.81, 0.9, 1.0]
    )


def test_a_helper_the_client_names_under_the_agent_is_a_sub_agent_of_its_open_call() -> None:
    # The LangChain adapter names a middleware's calls `<agent>/<middleware>`: a summary made
    # while the agent's tool call is open holds nothing of what the tool was given.
    episode = Episode()
    opened = episode.call(
        [system("Agent."), user("Look up step 3")],
        call_with("lookup", '{"step": 3}'),
        tools=TOOLS,
        agent="math",
    )
    summary = [user("Summarize this conversation: the user wants the facts")]
    helper = episode.call(summary, reply("Summary."), agent="math/summarization")
    stranger = episode.call(summary, reply("Summary."), agent="other/summarization")
    assert (helper.parent, helper.link) == (opened, Link.SUBAGENT)
    assert (stranger.parent, stranger.link) == (None, Link.ROOT)
