"""Property tests on random conversation trees, each checked against a brute-force reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rltap.cache import InteractionCache
from rltap.canonical import canonical_message
from rltap.errors import ExportMismatch
from rltap.types import InteractionStatus, InteractionWithTokenLogpReward, ModelResponse

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


steps = st.lists(
    st.builds(
        Step,
        parent=st.none() | st.integers(min_value=0, max_value=40),
        question=st.sampled_from(["a", "b", "c"]),
        reply=st.sampled_from(["x", "y"]),
        tool_reply=st.booleans(),
        fate=st.sampled_from(["complete"] * 6 + ["in_flight", "failed"]),
        reward=st.none() | st.floats(min_value=-2, max_value=2, allow_nan=False),
        new_tokens=st.lists(st.integers(0, 1000), min_size=1, max_size=4).map(tuple),
        output_tokens=st.lists(st.integers(0, 1000), min_size=1, max_size=4).map(tuple),
        reserialise=st.booleans(),
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
            messages = [_as_client_sends(m) if step.reserialise else m for m in history]
        messages.append({"role": "user", "content": step.question})
        expected_parent = reference_parent(nodes, messages)
        node = cache.add(InteractionWithTokenLogpReward(messages=messages))
        assert node.parent is expected_parent
        nodes.append(node)
        if step.fate == "failed":
            cache.fail(node.interaction_id, "boom")
        if step.fate != "complete":
            continue
        prefix: list[int] = []
        if node.parent is not None and node.parent.model_response is not None:
            parent_response = node.parent.model_response
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


def reference_parent(
    nodes: list[InteractionWithTokenLogpReward], messages: list[dict[str, Any]]
) -> InteractionWithTokenLogpReward | None:
    """Brute force: longest complete conversation that prefixes `messages`, latest on ties."""
    wanted = [canonical_message(m) for m in messages]
    best: InteractionWithTokenLogpReward | None = None
    best_len = 0
    for node in nodes:
        if not node.is_complete:
            continue
        full = [canonical_message(m) for m in [*node.messages, *(node.output_message_list or [])]]
        if len(full) <= len(wanted) and wanted[: len(full)] == full and len(full) >= best_len:
            best, best_len = node, len(full)
    return best


def reference_discount(
    node: InteractionWithTokenLogpReward,
    complete: list[InteractionWithTokenLogpReward],
    gamma: float,
    aggregate: str,
) -> float:
    kids = [c for c in complete if c.parent is node]
    own = node.reward or 0.0
    if not kids:
        return own
    values = [reference_discount(k, complete, gamma, aggregate) for k in kids]
    agg = {"mean": sum(values) / len(values), "max": max(values), "sum": sum(values)}[aggregate]
    return own + gamma * agg


@settings(max_examples=150, deadline=None)
@given(plan=steps)
def test_parent_resolution_matches_brute_force(plan: list[Step]) -> None:
    build(plan)  # asserts every parent against the reference as it goes


@settings(max_examples=100, deadline=None)
@given(
    plan=steps,
    gamma=st.floats(min_value=0, max_value=1),
    aggregate=st.sampled_from(["mean", "max", "sum"]),
)
def test_discount_matches_reference_recursion(
    plan: list[Step], gamma: float, aggregate: Any
) -> None:
    cache, nodes = build(plan)
    complete = [n for n in nodes if n.status is InteractionStatus.COMPLETE]
    rewards = cache.apply_reward_discount(gamma, aggregate=aggregate)
    assert set(rewards) == {n.interaction_id for n in complete}
    for node in complete:
        expected = reference_discount(node, complete, gamma, aggregate)
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
    parents = {n.parent_id for n in complete}
    assert set(exported) == {n.interaction_id for n in complete} - parents
    for leaf_id, leaf in exported.items():
        branch = [cache[leaf_id]]
        while branch[-1].parent is not None:
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


@settings(max_examples=60, deadline=None)
@given(plan=steps, data=st.data())
def test_a_broken_prefix_raises(plan: list[Step], data: st.DataObject) -> None:
    cache, _ = build(plan)
    children = [n for n in cache.values() if n.is_complete and n.parent is not None]
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
