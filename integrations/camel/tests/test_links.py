"""How a CAMEL role play is linked: one tree, each role agent's calls a chain under its role name.

The role agents' memory window (`message_window_size`) is shorter than the dialogue, so an agent's
call continues its previous one exactly (`prefix`) only while the window still holds the whole
dialogue; after that the oldest messages drop out and the call carries its previous reply after a
trimmed history (`rewrite`, rule 2 of `rltap.tree.links`). The chains start where the other's words
are carried (`carry`, rule 4): the student's first call holds the task the task-specify agent
wrote (in its system prompt), the tutor's first call the student's first instruction (as a user
message). Later, each agent's own chain wins (`prefix` comes first), so the tutor's reward flows
back along its calls, then to the student's first call and the task-specify call.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from camel.agents import ChatAgent
from camel.messages import BaseMessage
from camel.societies import RolePlaying

from rltap.adapter import Connection
from rltap.config import EpisodeConfig
from rltap.record.types import InteractionWithTokenLogpReward, Link
from rltap.rollout.workflow import OpenAIProxyWorkflow, WorkflowSettings
from rltap.testing import RunningProxy
from rltap_camel import CamelAdapter, ProxyModel, name_agents

ASSISTANT, USER = "Math Tutor", "Student"
ROUNDS = 4
# Messages each role agent keeps besides its system message: its k-th call (k = 1, 2, ...) has
# 2k - 1 of them, so the first two calls fit and the last two lose their oldest messages.
WINDOW = 4
CHAIN_LINKS = [Link.CARRY, Link.PREFIX, Link.REWRITE, Link.REWRITE]
DISCOUNT = 0.9
TASK = {"task": "Add two and two for a grocery list"}

# CAMEL warns on every call whose window is full: here that is the point.
pytestmark = pytest.mark.filterwarnings("ignore:Chat history window size limit:UserWarning")


def windowed_role_play(data: Any, model: ProxyModel) -> str:
    """Task-specify call, then ROUNDS steps of the user and the assistant, both windowed."""
    society = name_agents(
        RolePlaying(
            assistant_role_name=ASSISTANT,
            user_role_name=USER,
            task_prompt=data["task"],
            model=model,
            assistant_agent_kwargs={"message_window_size": WINDOW},
            user_agent_kwargs={"message_window_size": WINDOW},
        )
    )
    message = society.init_chat()
    for _ in range(ROUNDS):
        assistant, _user = society.step(message)
        message = assistant.msg
    return str(message.content)


def answered(answer: str, data: Any) -> float:
    return 1.0 if answer.startswith("Turn ") else 0.0  # the script's echo reached the end


async def run_role_play(
    proxy: RunningProxy, agents: tuple[str, ...] | None = None
) -> list[InteractionWithTokenLogpReward]:
    agent = CamelAdapter(windowed_role_play, reward_fn=answered)
    workflow = OpenAIProxyWorkflow(
        agent,
        proxy_addr=proxy.url,
        admin_key=proxy.admin_key,
        settings=WorkflowSettings(episodes=EpisodeConfig(discount=DISCOUNT), agents=agents),
        http_client=proxy.http,
    )
    result = await workflow.run_episode(TASK)
    assert result.error is None
    assert result.interactions is not None
    return list(result.interactions.values())


def assistant_rewards() -> list[float]:
    """1.0 on the assistant's last call, times the discount per link back to its first (every
    link kind at its default factor 1.0): 0.729, 0.81, 0.9, 1.0."""
    return [DISCOUNT ** (ROUNDS - 1 - k) for k in range(ROUNDS)]


def check_chain(
    chain: list[InteractionWithTokenLogpReward], agent: str, first_parent: str | None
) -> None:
    """One agent's calls: its name, trimmed by the window, each linked to the one before, the
    first to `first_parent`."""
    assert [i.agent_id for i in chain] == [agent] * ROUNDS
    assert f"Never forget you are a {agent}" in chain[0].messages[0]["content"]
    assert [len(i.messages) for i in chain] == [1 + min(2 * k - 1, WINDOW) for k in (1, 2, 3, 4)]
    assert [i.link for i in chain] == CHAIN_LINKS
    assert [i.parent_id for i in chain] == [first_parent] + [i.interaction_id for i in chain[:-1]]
    # Each call after the first carries its parent's reply as an assistant message.
    for parent, child in itertools.pairwise(chain):
        assert parent.output_message_list is not None
        assert parent.output_message_list[-1]["content"] in [
            m["content"] for m in child.messages if m["role"] == "assistant"
        ]


async def test_role_play_chains_link_through_the_memory_window(proxy: RunningProxy) -> None:
    specify, *dialogue = await run_role_play(proxy)
    assert len(dialogue) == 2 * ROUNDS
    users, assistants = dialogue[0::2], dialogue[1::2]  # RolePlaying.step: user, then assistant
    check_chain(users, USER, specify.interaction_id)
    check_chain(assistants, ASSISTANT, users[0].interaction_id)
    # The task-specify agent ran inside RolePlaying(...), before name_agents: no header, so the
    # proxy derived its id; its reply reaches the role agents inside their system prompts.
    assert specify.link is Link.ROOT
    assert specify.agent_id is not None
    assert specify.agent_id.startswith("agent-")
    assert specify.output_text in users[0].messages[0]["content"]
    assert specify.output_text in assistants[0].messages[0]["content"]
    assert [i.reward for i in assistants] == pytest.approx(assistant_rewards())
    # The student's later calls lead nowhere rewarded; its first call is the mean of its two
    # continuations (its own next call, 0, and the tutor's first), discounted.
    first_user = DISCOUNT * (0.0 + assistant_rewards()[0]) / 2
    assert [i.reward for i in [specify, *users]] == pytest.approx(
        [DISCOUNT * first_user, first_user] + [0.0] * (ROUNDS - 1)
    )


async def test_a_role_play_can_train_the_assistant_alone(proxy: RunningProxy) -> None:
    exported = await run_role_play(proxy, agents=(ASSISTANT,))
    # Its first call still names its parent, the student's first call, which is not exported.
    assert exported[0].parent_id is not None
    assert exported[0].parent_id not in {i.interaction_id for i in exported}
    check_chain(exported, ASSISTANT, exported[0].parent_id)
    assert [i.reward for i in exported] == pytest.approx(assistant_rewards())


def ask_three(data: Any, model: ProxyModel) -> str:
    """One step each of a ChatAgent named in its system message, one with a plain-string system
    prompt, and one whose role name is not ASCII."""
    named = BaseMessage.make_assistant_message(role_name="Calculator", content="You add.")
    chinese = BaseMessage.make_assistant_message(role_name="计算器", content="You subtract.")
    for system in (named, "You multiply.", chinese):
        agent = name_agents(ChatAgent(system, model=model))
        answer = agent.step(data["question"]).msgs[0].content
    return str(answer)


async def test_only_agents_camel_names_send_a_name(proxy: RunningProxy) -> None:
    agent = CamelAdapter(ask_three, reward_fn=answered)
    workflow = OpenAIProxyWorkflow(
        agent, proxy_addr=proxy.url, admin_key=proxy.admin_key, http_client=proxy.http
    )
    result = await workflow.run_episode({"question": "2 and 2?"})
    assert result.error is None
    assert result.interactions is not None
    named, plain, chinese = result.interactions.values()
    assert (named.agent_id, chinese.agent_id) == ("Calculator", "计算器")
    # No name: an id derived from the system prompt (and tools).
    assert plain.agent_id is not None
    assert plain.agent_id.startswith("agent-")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("   ", id="blank"),
        pytest.param("x" * 257, id="overlong"),
    ],
)
async def test_a_name_no_header_can_carry_is_refused(name: str) -> None:
    model = ProxyModel(Connection(base_url="http://127.0.0.1:9/v1", api_key="unused"))
    try:
        with pytest.raises(ValueError, match="agent"):
            model.for_agent(name)
    finally:
        await model.aclose()


async def test_a_named_backend_keeps_its_name_under_other_settings() -> None:
    model = ProxyModel(Connection(base_url="http://127.0.0.1:9/v1", api_key="unused"))
    try:
        tutor = model.for_agent("Math Tutor")
        assert (model.agent, tutor.agent) == (None, "Math Tutor")
        assert tutor.with_config(stream=True, temperature=0.5).agent == "Math Tutor"
        assert tutor.for_agent("Student").agent == "Student"
    finally:
        await model.aclose()
