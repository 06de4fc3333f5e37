from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from rltap.record.errors import ExportMismatch, InvalidRequest
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.tree.cache import InteractionCache
from rltap.tree.export import concat_padded_tensors

Record = Callable[..., InteractionWithTokenLogpReward]

DTYPES = {
    "input_ids": torch.int32,
    "loss_mask": torch.int32,
    "logprobs": torch.float32,
    "versions": torch.int32,
    "attention_mask": torch.bool,
    "rewards": torch.float32,
}


def turns(*texts: str) -> list[dict[str, Any]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)]


def test_tensor_dict_has_the_seed_dtypes_and_shapes(record: Record) -> None:
    node = record(turns("q"), "a", new_prompt=[5, 6, 7], output=[8, 9], reward=1.0)
    tensors = node.to_tensor_dict()
    assert {k: v.dtype for k, v in tensors.items()} == DTYPES
    assert {k: tuple(v.shape) for k, v in tensors.items()} == {
        **{k: (1, 5) for k in DTYPES if k != "rewards"},
        "rewards": (1,),
    }
    assert tensors["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
    assert tensors["loss_mask"].tolist() == [[0, 0, 0, 1, 1]]
    assert tensors["logprobs"].tolist() == [[0.0, 0.0, 0.0, -0.5, -0.5]]
    assert tensors["versions"].tolist() == [[-1, -1, -1, 3, 3]]
    assert tensors["attention_mask"].all()
    assert tensors["rewards"].tolist() == [1.0]


def test_individual_exports_every_complete_interaction(
    record: Record, cache: InteractionCache
) -> None:
    a = record(turns("q1"), "a1")
    b = record(turns("q1", "a1", "q2"), "a2", reward=1.0)
    in_flight = cache.add(InteractionWithTokenLogpReward(messages=turns("q1", "a1", "q3")))
    failed = cache.add(InteractionWithTokenLogpReward(messages=turns("q1", "a1", "q4")))
    cache.fail(failed.interaction_id, "engine error")
    exported = cache.export_interactions(style="individual", reward_discount=0.9)
    assert list(exported) == [a.interaction_id, b.interaction_id]
    assert in_flight.interaction_id not in exported
    assert exported[a.interaction_id].reward == pytest.approx(0.9)
    assert exported[a.interaction_id] is not a


def test_concat_exports_one_sequence_per_leaf(record: Record, cache: InteractionCache) -> None:
    record(turns("q1"), "a1", new_prompt=[1, 2], output=[3, 4])
    record(turns("q1", "a1", "q2"), "a2", new_prompt=[5], output=[6, 7])
    leaf = record(
        turns("q1", "a1", "q2", "a2", "q3"), "a3", new_prompt=[8, 9], output=[10], reward=1.0
    )
    other = record(turns("q1", "a1", "other"), "o", new_prompt=[11], output=[12])
    exported = cache.export_interactions(style="concat", reward_discount=0.9)
    assert list(exported) == [leaf.interaction_id, other.interaction_id]
    tensors = exported[leaf.interaction_id].to_tensor_dict()
    assert tensors["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
    assert tensors["loss_mask"].tolist() == [[0, 0, 1, 1, 0, 1, 1, 0, 0, 1]]
    assert tensors["versions"].tolist() == [[-1, -1, 3, 3, -1, 3, 3, -1, -1, 3]]
    assert tensors["logprobs"][0, 2].item() == -0.5
    assert tensors["rewards"].tolist() == [1.0]
    assert exported[other.interaction_id].to_tensor_dict()["input_ids"].tolist() == [
        [1, 2, 3, 4, 11, 12]
    ]


def test_constrained_is_exported_per_sequence(record: Record, cache: InteractionCache) -> None:
    # A trainer drops or reweighs sequences sampled under a grammar's mask: individual exports
    # say it per call, concat exports per branch (any constrained segment marks it).
    root = record(turns("q1"), "a1", new_prompt=[1, 2], output=[3, 4])
    structured = record(turns("q1", "a1", "q2"), "a2", new_prompt=[5], output=[6], constrained=True)
    plain = record(turns("q1", "a1", "other"), "o", new_prompt=[11], output=[12])
    individual = cache.export_interactions(style="individual", reward_discount=1.0)
    assert {node.interaction_id: node.constrained for node in individual.values()} == {
        root.interaction_id: False,
        structured.interaction_id: True,
        plain.interaction_id: False,
    }
    concat = cache.export_interactions(style="concat", reward_discount=1.0)
    assert {node.interaction_id: node.constrained for node in concat.values()} == {
        structured.interaction_id: True,
        plain.interaction_id: False,
    }


def test_concat_refuses_a_broken_prefix(record: Record, cache: InteractionCache) -> None:
    parent = record(turns("q1"), "a1", new_prompt=[1, 2], output=[3, 4])
    child = record(turns("q1", "a1", "q2"), "a2")
    assert child.model_response is not None
    child.model_response.input_tokens[3] = 99  # e.g. a template that re-rendered the history
    with pytest.raises(ExportMismatch) as raised:
        cache.export_interactions(style="concat")
    assert parent.interaction_id in str(raised.value)
    assert child.interaction_id in str(raised.value)
    assert "position 3" in str(raised.value)


def test_unknown_style_is_refused(record: Record, cache: InteractionCache) -> None:
    record(turns("q"), "a")
    with pytest.raises(InvalidRequest):
        cache.export_interactions(style="flat")  # type: ignore[arg-type]


def test_padding_stacks_to_the_longest(record: Record, cache: InteractionCache) -> None:
    short = record(turns("q"), "a", new_prompt=[1], output=[2], reward=1.0).to_tensor_dict()
    long = record(turns("x"), "b", new_prompt=[3, 4, 5], output=[6], reward=0.5).to_tensor_dict()
    batch = concat_padded_tensors([short, long], pad_token_id=151643)
    assert batch["input_ids"].tolist() == [[1, 2, 151643, 151643], [3, 4, 5, 6]]
    assert batch["loss_mask"].tolist() == [[0, 1, 0, 0], [0, 0, 0, 1]]
    assert batch["versions"].tolist() == [[-1, 3, -1, -1], [-1, -1, -1, 3]]
    assert batch["attention_mask"].tolist() == [[True, True, False, False], [True] * 4]
    assert batch["rewards"].tolist() == [1.0, 0.5]
    assert {k: v.dtype for k, v in batch.items()} == DTYPES
    # Already-batched dicts merge the same way (groups of groups).
    assert concat_padded_tensors([batch, short])["input_ids"].shape == (3, 4)
