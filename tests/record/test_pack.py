"""pack_interactions and merge_tries (rltap.record.pack): which tokens are one, the leaves, and the
depth / parent / subtree-end arrays against a brute force over the recorded sequences."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rltap.record.errors import ExportMismatch
from rltap.record.pack import TreePack, merge_tries, pack_interactions
from rltap.record.types import (
    InteractionStatus,
    InteractionWithTokenLogpReward,
    Link,
    ModelResponse,
)
from rltap.tree.export import branch_sequence

Node = InteractionWithTokenLogpReward


def call(
    prompt: list[int],
    output: list[int],
    parent: Node | None = None,
    link: Link = Link.PREFIX,
    rng: random.Random | None = None,
) -> Node:
    """A complete call; along a prefix link `prompt` is what follows the parent's sequence, along
    any other link the call's whole prompt."""
    rng = rng or random.Random(len(prompt) * 31 + len(output))
    above = parent.model_response if parent is not None and link is Link.PREFIX else None
    history = [] if above is None else above.input_tokens + above.output_tokens
    response = ModelResponse(
        input_tokens=history + prompt,
        output_tokens=output,
        output_logprobs=[-rng.random() - 0.01 for _ in output],
        output_versions=[rng.randrange(5) for _ in output],
    )
    return Node(
        model_response=response,
        parent=parent,
        link=link if parent is not None else Link.ROOT,
        status=InteractionStatus.COMPLETE,
    )


def rewards_of(nodes: list[Node]) -> dict[str, float]:
    return {node.interaction_id: 0.5 + k for k, node in enumerate(nodes)}


def full(node: Node) -> list[int]:
    assert node.model_response is not None
    return node.model_response.input_tokens + node.model_response.output_tokens


def leaf_sequences(pack: TreePack) -> dict[str, list[int]]:
    return {leaf.interaction_id: pack.leaf_sequence(leaf).tolist() for leaf in pack.leaves}


def test_a_chain_is_one_branch_with_every_turn_generated_once() -> None:
    a = call([1, 2, 3], [10, 11])
    b = call([4], [12, 13, 14], parent=a)
    c = call([5, 6], [15], parent=b)
    nodes = [a, b, c]
    pack = pack_interactions(nodes, rewards_of(nodes))
    assert pack.input_ids.tolist() == full(c)
    assert pack.position_ids.tolist() == list(range(len(full(c))))
    assert pack.parent_index.tolist() == list(range(-1, len(full(c)) - 1))
    assert pack.loss_mask.tolist() == [0, 0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1]
    assert pack.interaction_index.tolist() == [-1, -1, -1, 0, 0, -1, 1, 1, 1, -1, -1, 2]
    generated = pack.loss_mask == 1
    expected = [lp for n in nodes for lp in n.model_response.output_logprobs]  # type: ignore[union-attr]
    assert pack.logprobs[generated].tolist() == pytest.approx(expected, abs=1e-7)
    assert pack.rewards[generated].tolist() == [0.5, 0.5, 1.5, 1.5, 1.5, 2.5]
    assert [(leaf.interaction_id, leaf.reward) for leaf in pack.leaves] == [(c.interaction_id, 2.5)]
    assert leaf_sequences(pack) == {c.interaction_id: branch_sequence(c).input_ids}


def test_n4_siblings_share_their_prompt_and_keep_their_own_samples() -> None:
    prompt = [7, 8, 9, 10]
    # Two samples generate the same tokens: each keeps its branch (its logprobs, its reward).
    outputs = [[1, 2], [1, 2], [3], [1, 4, 5]]
    siblings = [call(prompt, output, rng=random.Random(k)) for k, output in enumerate(outputs)]
    pack = pack_interactions(siblings, rewards_of(siblings))
    assert len(pack) == len(prompt) + sum(map(len, outputs))
    assert pack.input_ids[:4].tolist() == prompt
    assert (pack.loss_mask[:4] == 0).all()
    assert leaf_sequences(pack) == {s.interaction_id: full(s) for s in siblings}
    roots_of_samples = np.flatnonzero(pack.parent_index == 3)
    assert pack.interaction_index[roots_of_samples].tolist() == [0, 1, 2, 3]


def test_a_group_of_sessions_shares_one_prompt_once() -> None:
    prompt = [100, 101, 102, 103, 104, 105]
    sessions = []
    for episode in range(3):
        first = call(prompt, [episode, 50], rng=random.Random(episode))
        second = call([60, episode], [70], parent=first, rng=random.Random(episode + 9))
        sessions.append([first, second])
    packs = [pack_interactions(s, rewards_of(s)) for s in sessions]
    merged = merge_tries(packs)
    together = [node for session in sessions for node in session]
    rewards = {k: v for session in sessions for k, v in rewards_of(session).items()}
    assert len(merged) == len(prompt) + sum(len(p) - len(prompt) for p in packs)
    # Merging the sessions' packs is packing the group at once, array by array.
    at_once = pack_interactions(together, rewards)
    for name in ("input_ids", "position_ids", "parent_index", "subtree_end", "loss_mask"):
        assert getattr(merged, name).tolist() == getattr(at_once, name).tolist(), name
    for name in ("logprobs", "versions", "interaction_index", "rewards"):
        assert getattr(merged, name).tolist() == getattr(at_once, name).tolist(), name
    assert merged.interaction_ids == at_once.interaction_ids
    assert leaf_sequences(merged) == leaf_sequences(at_once)
    assert [leaf.reward for leaf in merged.leaves] == [leaf.reward for leaf in at_once.leaves]
    with pytest.raises(ValueError, match="share an interaction id"):
        merge_tries([packs[0], packs[0]])


def test_a_rewrite_child_branches_after_the_prompt_it_shares() -> None:
    root = call([1, 2, 3, 4], [20, 21])
    # A summary of the history: the same first tokens, then its own; it also repeats the
    # parent's reply as prompt text, which is not the parent's generated tokens.
    rewrite = call([1, 2, 9, 20, 21], [30], parent=root, link=Link.REWRITE)
    nodes = [root, rewrite]
    pack = pack_interactions(nodes, rewards_of(nodes))
    assert len(pack) == 6 + 4
    assert pack.input_ids.tolist() == [1, 2, 3, 4, 20, 21, 9, 20, 21, 30]
    assert pack.parent_index[6] == 1  # branches after the shared [1, 2]
    assert pack.loss_mask.tolist() == [0, 0, 0, 0, 1, 1, 0, 0, 0, 1]
    assert leaf_sequences(pack) == {n.interaction_id: full(n) for n in nodes}


def test_a_prefix_child_that_does_not_continue_its_parent_is_refused() -> None:
    parent = call([1, 2], [3, 4])
    child = call([9], [5], parent=parent)
    assert child.model_response is not None
    child.model_response.input_tokens[3] = 99  # the parent's reply re-tokenised differently
    with pytest.raises(ExportMismatch, match=child.interaction_id):
        pack_interactions([parent, child], rewards_of([parent, child]))


def random_session(seed: int, calls: int) -> list[Node]:
    """Calls over a 3-token vocabulary (so prompts merge often): roots, prefix continuations
    of earlier calls, rewrites of them, n > 1 samples of one prompt."""
    rng = random.Random(seed)
    made: list[Node] = []
    while len(made) < calls:
        prompt = [rng.randrange(3) for _ in range(rng.randint(1, 3))]
        parent = rng.choice(made) if made and rng.random() < 0.7 else None
        link = Link.REWRITE if parent is not None and rng.random() < 0.25 else Link.PREFIX
        for _ in range(rng.choice([1, 1, 2])):
            output = [rng.randrange(3) for _ in range(rng.randint(1, 3))]
            made.append(call(prompt, output, parent, link, rng))
    return made


def labelled(node: Node, index: dict[str, int]) -> list[tuple[int, int]]:
    """The node's whole sequence with each token's origin: the interaction that generated it
    (through its prefix ancestors) or -1 for a prompt token."""
    assert node.model_response is not None
    response = node.model_response
    parent = node.token_parent
    head = labelled(parent, index) if parent is not None else []
    prompt = [(token, -1) for token in response.input_tokens[len(head) :]]
    own = [(token, index[node.interaction_id]) for token in response.output_tokens]
    return head + prompt + own


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), calls=st.integers(1, 8))
def test_the_arrays_match_a_brute_force_over_the_sequences(seed: int, calls: int) -> None:
    nodes = random_session(seed, calls)
    pack = pack_interactions(nodes, rewards_of(nodes))
    index = {node.interaction_id: k for k, node in enumerate(nodes)}
    sequences = [labelled(node, index) for node in nodes]
    # Shared prefixes once: one token per distinct labelled prefix of any sequence.
    prefixes = {tuple(s[: k + 1]) for s in sequences for k in range(len(s))}
    assert len(pack) == len(prefixes)
    n = len(pack)
    ancestors = []
    for i in range(n):
        chain, j = [], i
        while j >= 0:
            chain.append(j)
            j = int(pack.parent_index[j])
        ancestors.append(set(chain))
        assert pack.parent_index[i] < i  # depth-first: a parent comes first
        assert pack.position_ids[i] == len(chain) - 1
        labels = tuple(
            (int(pack.input_ids[k]), int(pack.interaction_index[k])) for k in sorted(chain)
        )
        assert labels in prefixes
    for i in range(n):
        for j in range(n):
            assert pack.sees(i, j) == (j in ancestors[i])
    # The leaves are the concat export's sequences, with their rewards.
    continued = {n.token_parent.interaction_id for n in nodes if n.token_parent is not None}
    expected = {
        node.interaction_id: branch_sequence(node).input_ids
        for node in nodes
        if node.interaction_id not in continued
    }
    assert leaf_sequences(pack) == expected
    rewards = rewards_of(nodes)
    assert all(leaf.reward == rewards[leaf.interaction_id] for leaf in pack.leaves)
    generated = pack.interaction_index >= 0
    assert pack.rewards[generated].tolist() == [
        rewards[pack.interaction_ids[k]] for k in pack.interaction_index[generated]
    ]
    assert merge_tries([pack]).input_ids.tolist() == pack.input_ids.tolist()
