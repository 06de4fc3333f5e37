"""Micro-batches of tree packs (rltap.train.batches) and the trainer-neutral outputs
(rltap.train.layouts): nothing dropped, every token keeps its context, the file reads back,
verl's rows line up."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rltap.record.errors import ContextLengthExceeded
from rltap.record.pack import TreePack, pack_interactions
from rltap.record.pack_io import load_packs, save_packs
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.testing.packs import recorded_call
from rltap.train.batches import micro_batches, split_pack
from rltap.train.forward import packed_logprobs
from rltap.train.layouts import leaf_values, verl_batch


def call(
    prompt: list[int], output: list[int], parent: InteractionWithTokenLogpReward | None = None
) -> InteractionWithTokenLogpReward:
    """A recorded call (`prompt`: the new tokens after the parent's whole sequence) whose tokens
    carry logprobs and versions of their own, to be found again after splitting."""
    made = recorded_call(prompt, output, parent)
    assert made.model_response is not None
    made.model_response.output_logprobs = [-0.1 * k - random.random() for k in range(len(output))]
    made.model_response.output_versions = [random.randrange(4) for _ in output]
    return made


def random_tree(seed: int, calls: int) -> TreePack:
    """Calls that start over (sharing a prompt prefix or not) or continue an earlier call, some
    as n>1 siblings with one prompt; a vocabulary of 4 so prompts merge often."""
    rng = random.Random(seed)
    made: list[InteractionWithTokenLogpReward] = []
    for _ in range(calls):
        parent = rng.choice(made) if made and rng.random() < 0.7 else None
        prompt = [rng.randrange(4) for _ in range(rng.randint(1, 4))]
        siblings = rng.choice([1, 1, 2, 3])  # n > 1 samples share the prompt
        outputs = [[rng.randrange(4) for _ in range(rng.randint(1, 3))] for _ in range(siblings)]
        made.extend(call(prompt, output, parent) for output in outputs)
    rewards = {i.interaction_id: rng.random() for i in made}
    return pack_interactions(made, rewards)


Token = tuple[int, float, int, float, tuple[int, ...]]


def generated(pack: TreePack) -> dict[tuple[str, int], Token]:
    """Each generated token by (interaction, depth): id, logprob, version, reward and the ids of
    its whole context (itself and its ancestors)."""
    found = {}
    for index in np.flatnonzero(pack.loss_mask):
        context, at = [], int(index)
        while at >= 0:
            context.append(int(pack.input_ids[at]))
            at = int(pack.parent_index[at])
        key = (pack.interaction_ids[pack.interaction_index[index]], int(pack.position_ids[index]))
        assert key not in found
        found[key] = (
            int(pack.input_ids[index]),
            float(pack.logprobs[index]),
            int(pack.versions[index]),
            float(pack.rewards[index]),
            tuple(context[::-1]),
        )
    return found


def assert_valid(pack: TreePack) -> None:
    """Depth-first layout: parents come first, depth grows by one, subtrees nest."""
    for index, parent in enumerate(pack.parent_index):
        if parent < 0:
            assert pack.position_ids[index] == 0
        else:
            assert parent < index < pack.subtree_end[parent]
            assert pack.position_ids[index] == pack.position_ids[parent] + 1
            assert pack.subtree_end[index] <= pack.subtree_end[parent]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), trees=st.integers(1, 3), budget=st.integers(12, 60))
def test_micro_batches_keep_every_generated_token_once_with_its_context(
    seed: int, trees: int, budget: int
) -> None:
    packs = [random_tree(seed + k, calls=6) for k in range(trees)]
    chain = max(int(pack.position_ids.max()) + 1 for pack in packs)
    budget = max(budget, chain)  # a chain longer than the budget is the error case below
    batches = micro_batches(packs, budget)
    expected: dict[tuple[str, int], Token] = {}
    for pack in packs:
        expected |= generated(pack)
    found: dict[tuple[str, int], Token] = {}
    for batch in batches:
        assert len(batch) <= budget
        assert_valid(batch)
        found_here = generated(batch)
        assert not found_here.keys() & found.keys()  # loss 1 exactly once
        found |= found_here
    assert found == expected
    leaves = {
        leaf.interaction_id: tuple(batch.leaf_sequence(leaf))
        for batch in batches
        for leaf in batch.leaves
    }
    assert sum(len(batch.leaves) for batch in batches) == len(leaves)
    assert leaves == {
        leaf.interaction_id: tuple(pack.leaf_sequence(leaf))
        for pack in packs
        for leaf in pack.leaves
    }


def test_a_tree_over_the_budget_splits_at_its_branch_point_with_the_prefix_again() -> None:
    root = call([1, 2, 3, 4], [5, 6])
    left, right = call([7], [8, 9], root), call([7], [10, 11], root)
    pack = pack_interactions([root, left, right], {})
    assert len(pack) == 11  # 4 + 2 shared, the prompt 7 once, then 2 + 2
    pieces = split_pack(pack, 9)
    assert [piece.input_ids.tolist() for piece in pieces] == [
        [1, 2, 3, 4, 5, 6, 7, 10, 11],
        [1, 2, 3, 4, 5, 6, 7, 8, 9],
    ]
    assert [piece.loss_mask.tolist() for piece in pieces] == [
        [0, 0, 0, 0, 1, 1, 0, 1, 1],
        [0] * 7 + [1, 1],  # the root's output is context here: its loss counts once, above
    ]
    assert [[leaf.interaction_id for leaf in piece.leaves] for piece in pieces] == [
        [right.interaction_id],
        [left.interaction_id],
    ]


def test_split_pieces_keep_each_calls_policy() -> None:
    root = call([1, 2, 3, 4], [5, 6])
    left, right = call([7], [8, 9], root), call([7], [10, 11], root)
    for node, policy in ((root, "tutor"), (left, "student"), (right, None)):
        node.policy = policy
    pieces = split_pack(pack_interactions([root, left, right], {}), 9)
    policy_of = {root.interaction_id: "tutor", left.interaction_id: "student"}
    for piece in pieces:
        assert piece.interaction_policies is not None
        for interaction_id, policy in zip(
            piece.interaction_ids, piece.interaction_policies, strict=True
        ):
            assert policy == policy_of.get(interaction_id)
    # the student's two tokens are trained in the piece of its leaf, the tutor's in one piece
    assert sum(int(piece.policy_mask("student").sum()) for piece in pieces) == 2
    assert sum(int((piece.policy_mask("tutor") * piece.loss_mask).sum()) for piece in pieces) == 2


def test_a_chain_longer_than_the_budget_is_an_error_naming_the_budget() -> None:
    pack = pack_interactions([call([1, 2, 3], [4, 5, 6])], {})
    with pytest.raises(ContextLengthExceeded, match="bound of 5 tokens"):
        micro_batches([pack], 5)


def test_pieces_fill_micro_batches_first_fit_decreasing() -> None:
    packs = [pack_interactions([call([1] * n, [2])], {}) for n in (2, 5, 3, 6, 1)]
    batches = micro_batches(packs, 10)
    # Sizes 3, 6, 4, 7, 2: 7 opens a batch, 6 another, 4 joins 6, 3 joins 7, 2 fits nowhere.
    assert [len(batch) for batch in batches] == [10, 10, 2]
    assert [len(batch.leaves) for batch in batches] == [2, 2, 1]


def test_a_pack_bound_below_the_budget_splits_trees_and_still_fills_batches() -> None:
    root = call([1, 2, 3, 4], [5, 6])
    left, right = call([7], [8, 9], root), call([7], [10, 11], root)
    other = call([3], [4])
    packs = [pack_interactions([root, left, right], {}), pack_interactions([other], {})]
    batches = micro_batches(packs, 20, max_pack_tokens=9)
    # The 11-token tree as two 9-token pieces: 9 + 9 + 2 = 20 fills one micro-batch.
    assert [len(batch) for batch in batches] == [20]
    assert int(np.count_nonzero(batches[0].parent_index < 0)) == 3
    with pytest.raises(ValueError, match="max_pack_tokens must be in"):
        micro_batches(packs, 8, max_pack_tokens=9)


def test_micro_batches_written_to_batch_safetensors_read_back(tmp_path: Path) -> None:
    packs = [random_tree(seed, calls=5) for seed in range(3)]
    batches = micro_batches(packs, max(len(pack) for pack in packs))
    save_packs(tmp_path / "batch.safetensors", batches)
    loaded = load_packs(tmp_path / "batch.safetensors")
    assert len(loaded) == len(batches)
    for before, after in zip(batches, loaded, strict=True):
        assert generated(after) == generated(before)
        assert after.interaction_ids == before.interaction_ids
        assert [(leaf.interaction_id, leaf.path.tolist()) for leaf in after.leaves] == [
            (leaf.interaction_id, leaf.path.tolist()) for leaf in before.leaves
        ]


def test_leaf_values_follow_each_leaf_path() -> None:
    root = call([1, 2], [3])
    left, right = call([4], [5], root), call([6], [7, 8], root)
    pack = pack_interactions([root, left, right], {})
    per_token = np.arange(len(pack), dtype=np.float32) * 10
    values = leaf_values(pack, per_token)
    assert [value.tolist() for value in values] == [[0, 10, 20, 30, 40], [0, 10, 20, 50, 60, 70]]
    with pytest.raises(ValueError, match="the pack has 8 tokens"):
        leaf_values(pack, per_token[:3])


def test_verl_batch_rows_one_per_leaf_prompt_left_response_right() -> None:
    root = call([1, 2], [3])
    long_prompt = call([9, 9, 9], [4])
    child = call([5], [6, 7], root)
    pack = pack_interactions([root, long_prompt, child], {child.interaction_id: 1.5})
    batch = verl_batch(pack, pad_token_id=0)
    # Leaves in call order: [9 9 9 | 4] and [1 2 | 3 5 6 7] (the root is continued, no leaf):
    # prompts left-padded to 3, responses right-padded to 4.
    assert batch["input_ids"].tolist() == [[9, 9, 9, 4, 0, 0, 0], [0, 1, 2, 3, 5, 6, 7]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1, 1]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 3, 3, 3], [0, 0, 1, 2, 3, 4, 5]]
    assert batch["responses"].tolist() == [[4, 0, 0, 0], [3, 5, 6, 7]]
    assert batch["response_mask"].tolist() == [[1, 0, 0, 0], [1, 0, 1, 1]]
    logps = [r.model_response.output_logprobs for r in (long_prompt, root, child)]  # type: ignore[union-attr]
    np.testing.assert_allclose(
        batch["old_log_probs"], [[logps[0][0], 0, 0, 0], [logps[1][0], 0, *logps[2]]], rtol=1e-6
    )
    assert batch["token_level_rewards"].tolist() == [[0, 0, 0, 0], [0, 0, 0, 1.5]]
    assert {key: value.dtype.kind for key, value in batch.items()} == {
        "input_ids": "i",
        "attention_mask": "i",
        "position_ids": "i",
        "responses": "i",
        "response_mask": "i",
        "old_log_probs": "f",
        "token_level_rewards": "f",
    }


def test_split_micro_batches_give_the_model_the_same_logprobs(tiny_model: Any) -> None:
    import torch

    packs = [random_tree(seed, calls=6) for seed in (11, 12)]
    budget = max(int(pack.position_ids.max()) + 1 for pack in packs) + 2
    batches = micro_batches(packs, budget)
    assert len(batches) > len(packs)  # the trees were split

    def by_token(pack: TreePack) -> dict[tuple[str, int], float]:
        with torch.no_grad():
            values = packed_logprobs(tiny_model, pack).numpy()
        keys = generated(pack)
        return {
            key: float(values[i])
            for key, i in zip(keys, np.flatnonzero(pack.loss_mask), strict=True)
        }

    whole = {key: value for pack in packs for key, value in by_token(pack).items()}
    split = {key: value for batch in batches for key, value in by_token(batch).items()}
    assert split.keys() == whole.keys()
    np.testing.assert_allclose([split[key] for key in whole], list(whole.values()), atol=1e-5)


def test_verl_rows_score_their_responses_as_the_pack_does(tiny_model: Any) -> None:
    import torch

    pack = random_tree(5, calls=4)
    with torch.no_grad():
        packed = packed_logprobs(tiny_model, pack)
        batch = verl_batch(pack, logprobs=packed.numpy())
        tensors = {key: torch.from_numpy(value) for key, value in batch.items()}
        logits = tiny_model(
            input_ids=tensors["input_ids"],
            attention_mask=tensors["attention_mask"],
            position_ids=tensors["position_ids"],
        ).logits
    width = tensors["responses"].shape[1]
    # verl's actor: the logits before each response token predict it.
    scores = torch.log_softmax(logits[:, -width - 1 : -1].float(), -1)
    picked = scores.gather(-1, tensors["responses"][..., None])[..., 0]
    mask = tensors["response_mask"].bool()
    assert mask.any()
    np.testing.assert_allclose(picked[mask].numpy(), batch["old_log_probs"][mask], atol=1e-5)
