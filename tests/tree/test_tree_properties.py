"""Property tests on random conversation trees, each checked against a brute-force reference."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rltap.record.errors import ExportMismatch
from rltap.record.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    ModelResponse,
)
from rltap.tree.cache import InteractionCache
from rltap.tree.canonical import canonical_message
from rltap.tree.links import derive_agent_id

TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}


@dataclass(frozen=True)
class Step:
    parent: int | None  # index into the steps before, or a fresh conversation
    question: str
    reply: str
    tool_reply: bool
    fate: str  # complete | in_flight | failed
    reward: float | None
    new_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    reserialise: bool
    system: str | None  # the call's system prompt: another one is another agent
    trim: int  # messages of the history dropped after the system prompt (a trimmed window)


steps = st.lists(
    st.builds(
        Step,
        parent=st.none() | st.integers(min_value=0, max_value=40),
        # "1" is what the tool call is given: a call that says it may be that tool's sub-agent.
        question=st.sampled_from(["a", "b", "c", "1"]),
        reply=st.sampled_from(["x", "y"]),
        tool_reply=st.booleans(),
        fate=st.sampled_from(["complete"] * 6 + ["in_flight", "failed"]),
        reward=st.none() | st.floats(min_value=-2, max_value=2, allow_nan=False),
        new_tokens=st.lists(st.integers(0, 1000), min_size=1, max_size=4).map(tuple),
        output_tokens=st.lists(st.integers(0, 1000), min_size=1, max_size=4).map(tuple),
        reserialise=st.booleans(),
        system=st.sampled_from([None, None, "A", "B"]),
        trim=st.sampled_from([0, 0, 0, 1, 2]),
    ),
    min_size=1,
    max_size=30,
)


def _output(step: Step) -> dict[str, Any]:
    if step.tool_reply:
        return {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}
    return {"role": "assistant", "content": step.reply}


def _as_client_sends(message: dict[str, Any]) -> dict[str, Any]:
    """The same message as another framework would re-serialise it."""
    if message.get("tool_calls"):
        call = {"id": "other", "function": {"name": "f", "arguments": '{ "a":1 }'}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}
    return {**message, "content": [{"type": "text", "text": message["content"]}]}


def build(plan: list[Step]) -> tuple[InteractionCache, list[InteractionWithTokenLogpReward]]:
    cache = InteractionCache()
    nodes: list[InteractionWithTokenLogpReward] = []
    for step in plan:
        messages: list[dict[str, Any]] = []
        if step.parent is not None and nodes:
            base = nodes[step.parent % len(nodes)]
            history = [*base.messages, *(base.output_message_list or [_output(step)])]
            history = [m for m in history if m["role"] != "system"][step.trim :]
            messages = [_as_client_sends(m) if step.reserialise else m for m in history]
        messages.append({"role": "user", "content": step.question})
        if step.system is not None:
            messages.insert(0, {"role": "system", "content": step.system})
        expected = reference_link(nodes, messages)
        node = cache.add(InteractionWithTokenLogpReward(messages=messages))
        assert (node.parent, node.link, node.agent_id) == expected
        nodes.append(node)
        if step.fate == "failed":
            cache.fail(node.interaction_id, "boom")
        if step.fate != "complete":
            continue
        prefix: list[int] = []
        if node.token_parent is not None and node.token_parent.model_response is not None:
            parent_response = node.token_parent.model_response
            prefix = parent_response.input_tokens + parent_response.output_tokens
        out = list(step.output_tokens)
        response = ModelResponse(
            input_tokens=prefix + list(step.new_tokens),
            output_tokens=out,
            output_logprobs=[-0.25 * (i + 1) for i in range(len(out))],
            output_versions=[len(nodes)] * len(out),
        )
        cache.complete(node.interaction_id, response, [_output(step)])
        if step.reward is not None:
            cache.set_reward(node.interaction_id, step.reward)
    return cache, nodes


def _canon(messages: list[dict[str, Any]]) -> list[bytes]:
    return [canonical_message(m) for m in messages]


def _system(messages: list[dict[str, Any]]) -> list[bytes]:
    return _canon([m for m in messages[:1] if m["role"] == "system"])


def reference_link(
    nodes: list[InteractionWithTokenLogpReward], messages: list[dict[str, Any]]
) -> tuple[InteractionWithTokenLogpReward | None, Link, str]:
    """Brute force over every earlier node: the rules of `rltap.tree.links`, one after the other."""
    wanted = _canon(messages)
    complete = [node for node in nodes if node.is_complete]
    best: InteractionWithTokenLogpReward | None = None
    best_len = 0
    for node in complete:
        full = _canon([*node.messages, *(node.output_message_list or [])])
        if len(full) <= len(wanted) and wanted[: len(full)] == full and len(full) >= best_len:
            best, best_len = node, len(full)
    if best is not None:
        assert best.agent_id is not None
        return best, Link.PREFIX, best.agent_id
    for position in reversed(range(len(messages))):
        if messages[position]["role"] != "assistant":
            continue
        replied = [n for n in complete if wanted[position] in _canon(n.output_message_list or [])]
        if replied:
            parent = replied[-1]
            assert parent.agent_id is not None
            if _system(messages) == _system(parent.messages):
                return parent, Link.REWRITE, parent.agent_id
            return parent, Link.HANDOFF, derive_agent_id(messages, None)
    derived = derive_agent_id(messages, None)
    open_calls = [
        node
        for position, node in enumerate(nodes)
        if node.is_complete
        and any(m.get("tool_calls") for m in node.output_message_list or [])
        and not any(_closes(later, node) for later in nodes[position + 1 :])
    ]
    given = {str(value) for value in json.loads(TOOL_CALL["function"]["arguments"]).values()}
    held = {_text(m) for m in messages if m["role"] == "user"}
    if open_calls and open_calls[-1].agent_id != derived and given <= held:
        return open_calls[-1], Link.SUBAGENT, derived
    carried = reference_carry(complete, messages, derived)
    if carried is not None:
        return carried, Link.CARRY, derived
    return None, Link.ROOT, derived


def reference_carry(
    complete: list[InteractionWithTokenLogpReward], messages: list[dict[str, Any]], agent: str
) -> InteractionWithTokenLogpReward | None:
    """Rule 4 on these one-word replies: a message after the first turn whose text is a reply's
    (the last call that replied it), the calling agent's own before others, then the latest."""
    first = next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
    found: dict[str, tuple[bool, int, InteractionWithTokenLogpReward]] = {}
    for position, message in enumerate(messages):
        if position <= first or message.get("tool_calls") or message["content"] is None:
            continue
        text = _text(message).strip()
        replied = [n for n in complete if (n.output_message_list or [{}])[0].get("content") == text]
        if text and replied:
            node = replied[-1]
            found[node.interaction_id] = (node.agent_id == agent, position, node)
    return max(found.values(), key=lambda entry: entry[:2])[2] if found else None


def _text(message: dict[str, Any]) -> str:
    """A message's text, through the text-part lists that re-serialising wraps it in."""
    content = message["content"]
    while not isinstance(content, str):
        content = "".join(_text({"content": part["text"]}) for part in content)
    return content


def _closes(later: InteractionWithTokenLogpReward, opened: InteractionWithTokenLogpReward) -> bool:
    """Whether `later` closes the tool call of `opened`: it continues it, or the session moved
    on outside its subtree."""
    if later.parent is opened:
        return later.link is not Link.SUBAGENT
    node = later.parent
    while node is not None and node is not opened:
        node = node.parent
    return node is None


def reference_anchor(
    node: InteractionWithTokenLogpReward, complete: list[InteractionWithTokenLogpReward]
) -> InteractionWithTokenLogpReward | None:
    """The call whose open tool call the sub-agent `node` belongs to answers, if any."""
    while node.parent is not None and any(node.parent is c for c in complete):
        if node.link is Link.SUBAGENT:
            return node.parent
        node = node.parent
    return None


def reference_discount(
    node: InteractionWithTokenLogpReward,
    complete: list[InteractionWithTokenLogpReward],
    gamma: float,
    aggregate: str,
    factors: dict[str, float],
) -> float:
    """Recursion over the definition: continuations pass reward up, an anchor's continuations
    pass it to the sub-agent calls nothing continues."""

    def continuations(of: InteractionWithTokenLogpReward) -> list[float]:
        kids = [c for c in complete if c.parent is of and c.link is not Link.SUBAGENT]
        return [
            factors[str(k.link)] * reference_discount(k, complete, gamma, aggregate, factors)
            for k in kids
        ]

    def agg(values: list[float]) -> float:
        return {"mean": sum(values) / len(values), "max": max(values), "sum": sum(values)}[
            aggregate
        ]

    own = node.reward or 0.0
    if values := continuations(node):
        return own + gamma * agg(values)
    anchor = reference_anchor(node, complete)
    if anchor is not None and (values := continuations(anchor)):
        return own + gamma * factors["subagent"] * agg(values)
    return own


@settings(max_examples=150, deadline=None)
@given(plan=steps)
def test_parent_resolution_matches_brute_force(plan: list[Step]) -> None:
    build(plan)  # asserts every parent against the reference as it goes


@settings(max_examples=100, deadline=None)
@given(
    plan=steps,
    gamma=st.floats(min_value=0, max_value=1),
    aggregate=st.sampled_from(["mean", "max", "sum"]),
    factors=st.fixed_dictionaries(
        {
            kind: st.sampled_from([1.0, 0.5, 0.0])
            for kind in ("prefix", "rewrite", "handoff", "carry")
        }
        | {"subagent": st.floats(min_value=0, max_value=1)}
    ),
)
def test_discount_matches_reference_recursion(
    plan: list[Step], gamma: float, aggregate: Any, factors: dict[str, float]
) -> None:
    cache, nodes = build(plan)
    complete = [n for n in nodes if n.status is InteractionStatus.COMPLETE]
    rewards = cache.apply_reward_discount(gamma, aggregate=aggregate, link_factors=factors)
    assert set(rewards) == {n.interaction_id for n in complete}
    for node in complete:
        expected = reference_discount(node, complete, gamma, aggregate, factors)
        assert rewards[node.interaction_id] == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(plan=steps)
def test_exported_tensors_have_exact_dtypes_and_shapes(plan: list[Step]) -> None:
    cache, _ = build(plan)
    for style in ("individual", "concat"):
        for node in cache.export_interactions(style=style).values():
            tensors = node.to_tensor_dict()
            length = tensors["input_ids"].shape[1]
            assert tensors["input_ids"].dtype == torch.int32
            assert tensors["loss_mask"].dtype == torch.int32
            assert tensors["logprobs"].dtype == torch.float32
            assert tensors["versions"].dtype == torch.int32
            assert tensors["attention_mask"].dtype == torch.bool
            assert tensors["rewards"].dtype == torch.float32
            assert tensors["rewards"].shape == (1,)
            for key in ("loss_mask", "logprobs", "versions", "attention_mask"):
                assert tensors[key].shape == (1, length)


@settings(max_examples=100, deadline=None)
@given(plan=steps)
def test_concat_leaf_is_its_branch_concatenated(plan: list[Step]) -> None:
    cache, _ = build(plan)
    exported = cache.export_interactions(style="concat")
    complete = [n for n in cache.values() if n.is_complete]
    continued = {n.parent_id for n in complete if n.link is Link.PREFIX}
    assert set(exported) == {n.interaction_id for n in complete} - continued
    for leaf_id, leaf in exported.items():
        branch = [cache[leaf_id]]
        while branch[-1].link is Link.PREFIX:
            assert branch[-1].parent is not None
            branch.append(branch[-1].parent)
        ids: list[int] = []
        mask: list[int] = []
        for node in reversed(branch):
            assert node.model_response is not None
            new_prompt = node.model_response.input_tokens[len(ids) :]
            ids += new_prompt + node.model_response.output_tokens
            mask += [0] * len(new_prompt) + [1] * node.model_response.output_len
        tensors = leaf.to_tensor_dict()
        assert tensors["input_ids"].tolist() == [ids]
        assert tensors["loss_mask"].tolist() == [mask]


# About a quarter of random plans have a prefix child to break: Hypothesis's health check then
# sometimes stops the test for discarding too much (seen once in four runs), though every plan
# it keeps is checked.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(plan=steps, data=st.data())
def test_a_broken_prefix_raises(plan: list[Step], data: st.DataObject) -> None:
    cache, _ = build(plan)
    children = [n for n in cache.values() if n.is_complete and n.link is Link.PREFIX]
    assume(children)
    child = data.draw(st.sampled_from(children))
    assert child.parent is not None
    assert child.parent.model_response is not None
    assert child.model_response is not None
    parent_len = child.parent.model_response.input_len + child.parent.model_response.output_len
    position = data.draw(st.integers(0, parent_len - 1))
    child.model_response.input_tokens[position] += 1
    with pytest.raises(ExportMismatch, match=child.interaction_id):
        cache.export_interactions(style="concat")
