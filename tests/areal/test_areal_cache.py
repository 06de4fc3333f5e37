"""`rltap.areal.InteractionCache`: AReaL 1.0.4's cache contract on rltap's conversation tree.

The episode used throughout is a branching tree: `a` is the first reply, `b` and `c` both
continue it (two different follow-up questions), inserted in that order. Token ids are
consistent with the messages, so `concat` exports can check every child against its parent.
"""

from __future__ import annotations

from typing import Any

import pytest

import rltap
from rltap.areal import InteractionCache, InteractionWithTokenLogpReward
from rltap.areal import ModelResponse as AReaLResponse
from rltap.record.errors import ExportMismatch
from rltap.record.types import InteractionStatus, Link, ModelResponse, StopReason

USER_0 = {"role": "user", "content": "2+2?"}
ANSWER_0 = {"role": "assistant", "content": "4"}
ASK_B = [USER_0, ANSWER_0, {"role": "user", "content": "and 3+3?"}]
ASK_C = [USER_0, ANSWER_0, {"role": "user", "content": "and 5+5?"}]

# (messages, reply text, prompt ids, output ids) of a, b, c; b and c extend a's whole sequence.
EPISODE: dict[str, tuple[list[dict[str, Any]], str, list[int], list[int]]] = {
    "a": ([USER_0], "4", [10, 11], [12]),
    "b": (ASK_B, "6", [10, 11, 12, 13], [14]),
    "c": (ASK_C, "10", [10, 11, 12, 15], [16, 17]),
}


def response(prompt: list[int], output: list[int]) -> ModelResponse:
    logprobs = [-0.1 * (i + 1) for i in range(len(output))]
    return ModelResponse(
        input_tokens=prompt,
        output_tokens=output,
        output_logprobs=logprobs,
        output_versions=[0] * len(output),
    )


def interaction(name: str, chat_template_type: str = "concat") -> InteractionWithTokenLogpReward:
    """Interaction `name` of the episode, replied, built the way AReaL's client builds one."""
    messages, text, prompt, output = EPISODE[name]
    return InteractionWithTokenLogpReward(
        model_response=response(prompt, output),
        output_message_list=[{"role": "assistant", "content": text}],
        messages=list(messages),
        chat_template_type=chat_template_type,
    )


def episode(chat_template_type: str = "concat") -> dict[str, InteractionWithTokenLogpReward]:
    return {name: interaction(name, chat_template_type) for name in EPISODE}


def rewards(interactions: dict[str, InteractionWithTokenLogpReward]) -> dict[str, float | None]:
    return {name: node.reward for name, node in interactions.items()}


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda items: InteractionCache(items), id="mapping"),
        pytest.param(lambda items: InteractionCache(**items), id="keywords"),
    ],
)
def test_the_cache_is_filled_from_items_as_a_dict_is(build: Any) -> None:
    items = episode()
    cache = build(items)
    assert list(cache) == ["a", "b", "c"]
    assert all(cache[name] is items[name] for name in items)
    assert cache["b"].parent is items["a"]
    assert cache["c"].parent is items["a"]


def test_an_interaction_stored_the_areal_way_is_complete() -> None:
    cache = InteractionCache()
    cache["a"] = interaction("a")
    cache["b"] = interaction("b")
    assert cache["a"].status is InteractionStatus.COMPLETE
    assert cache["b"].parent is cache["a"]  # a parent of the next call by prefix
    assert cache.last_interaction_id == "b"
    cache.set_last_reward(1.0)
    exported = cache.export_interactions("individual")
    assert list(exported) == ["a", "b"]
    assert rewards(exported) == {"a": None, "b": 1.0}  # AReaL's: as they stand


def test_an_interaction_stored_before_its_reply_completes_when_the_reply_is_set() -> None:
    cache = InteractionCache()
    messages, text, prompt, output = EPISODE["a"]
    cache["a"] = InteractionWithTokenLogpReward(
        messages=list(messages), chat_template_type="concat"
    )
    assert cache["a"].status is InteractionStatus.IN_FLIGHT
    assert cache.export_interactions("individual") == {}

    # AReaL's client finishes a call by setting the reply on the stored object.
    stored = cache["a"]
    stored.model_response = response(prompt, output)
    stored.output_message_list = [{"role": "assistant", "content": text}]
    cache["b"] = interaction("b")

    assert stored.status is InteractionStatus.COMPLETE
    assert cache["b"].parent is stored
    cache.set_reward("a", 0.5)
    assert rewards(cache.export_interactions("individual")) == {"a": 0.5, "b": None}


def test_an_areal_model_response_is_read_into_rltaps() -> None:
    messages, text, prompt, _ = EPISODE["a"]
    areal_response = AReaLResponse(
        input_tokens=prompt,
        output_tokens=[12, 99],
        output_logprobs=[-0.5, -1.5],
        output_versions=[4, 4],
        stop_reason="length",
    )
    cache = InteractionCache()
    cache["a"] = InteractionWithTokenLogpReward(
        model_response=areal_response,  # type: ignore[arg-type]
        output_message_list=[{"role": "assistant", "content": text}],
        messages=list(messages),
    )
    recorded = cache["a"].model_response
    assert isinstance(recorded, ModelResponse)
    assert (recorded.input_tokens, recorded.output_tokens) == (prompt, [12, 99])
    assert (recorded.output_logprobs, recorded.output_versions) == ([-0.5, -1.5], [4, 4])
    assert recorded.stop_reason is StopReason.LENGTH
    assert cache.export_interactions("individual")["a"].to_tensor_dict()["versions"].tolist() == [
        [-1, -1, 4, 4]
    ]


def test_apply_reward_discount_chains_backwards_in_insertion_order_into_the_interactions() -> None:
    cache = InteractionCache(episode())
    cache.set_last_reward(10.0)
    discounted = cache.apply_reward_discount(turn_discount=0.9)
    assert rewards(discounted) == pytest.approx({"a": 8.1, "b": 9.0, "c": 10.0})
    assert [cache[name].reward for name in "abc"] == pytest.approx([8.1, 9.0, 10.0])
    assert rewards(cache.export_interactions("individual")) == pytest.approx(
        {"a": 8.1, "b": 9.0, "c": 10.0}
    )


def test_apply_reward_discount_a_second_time_is_a_runtime_error() -> None:
    cache = InteractionCache(episode())
    cache.set_last_reward(10.0)
    cache.apply_reward_discount(turn_discount=0.9)
    with pytest.raises(RuntimeError) as raised:
        cache.apply_reward_discount(turn_discount=0.9)
    assert str(raised.value) == "apply_reward_discount should only be called once."  # AReaL's
    assert [cache[name].reward for name in "abc"] == pytest.approx([8.1, 9.0, 10.0])


def test_export_with_reward_discount_discounts_once() -> None:
    cache = InteractionCache(episode())
    cache.set_last_reward(10.0)
    first = cache.export_interactions("individual", reward_discount=0.9)
    again = cache.export_interactions("individual", reward_discount=0.5)
    assert rewards(first) == pytest.approx({"a": 8.1, "b": 9.0, "c": 10.0})
    assert rewards(again) == rewards(first)
    with pytest.raises(RuntimeError):
        cache.apply_reward_discount(turn_discount=0.9)


def test_concat_exports_the_leaves_of_the_tree_with_their_parents() -> None:
    cache = InteractionCache(episode())
    exported = cache.export_interactions("concat")
    assert list(exported) == ["b", "c"]
    assert [exported[name].parent_id for name in ("b", "c")] == ["a", "a"]
    tensors = exported["c"].to_tensor_dict()
    # c's sequence is the whole branch: a's reply is trained on too, c's new prompt is not.
    assert tensors["input_ids"].tolist() == [[10, 11, 12, 15, 16, 17]]
    assert tensors["loss_mask"].tolist() == [[0, 0, 1, 0, 1, 1]]


def test_an_individual_export_links_each_copy_to_its_exported_parent() -> None:
    cache = InteractionCache(episode())
    exported = cache.export_interactions("individual")
    assert exported["a"].parent is None
    assert exported["b"].parent is exported["a"]
    assert exported["c"].parent is exported["a"]
    # The copies are the export's own: the cache keeps its interactions, linked as they were.
    assert exported["a"] is not cache["a"]
    assert cache["b"].parent is cache["a"]


def test_a_concat_export_links_a_leaf_to_its_exported_parent_or_else_the_cached_one() -> None:
    a = interaction("a")
    # d rewrites a's history (another prompt, not a's tokens continued): both are leaves.
    d = interaction("b")
    d.model_response = response([10, 11, 20, 13], [14])
    d.parent, d.link = a, Link.REWRITE
    cache = InteractionCache({"a": a, "d": d})

    leaves = cache.export_interactions("concat")
    assert list(leaves) == ["a", "d"]
    assert leaves["d"].parent is leaves["a"]

    cache = InteractionCache(episode())
    leaves = cache.export_interactions("concat")
    assert leaves["b"].parent is cache["a"]  # not exported: as AReaL's, the cached interaction


def test_an_unrewarded_interaction_exports_none_and_trains_on_zero() -> None:
    cache = InteractionCache(episode())
    cache.set_reward("c", 1.0)
    for style in ("individual", "concat"):
        exported = cache.export_interactions(style)
        assert exported["b"].reward is None
        assert exported["b"].to_tensor_dict()["rewards"].tolist() == [0.0]
        assert exported["c"].reward == 1.0


@pytest.mark.parametrize(
    ("chat_template_type", "ids", "mask"),
    [
        pytest.param("concat", [10, 11, 12, 15, 16, 17], [0, 0, 1, 0, 1, 1], id="concat-branch"),
        pytest.param("hf", [10, 11, 12, 15, 16, 17], [0, 0, 0, 0, 1, 1], id="hf-own-call"),
    ],
)
def test_an_individual_export_trains_a_concat_rendered_call_on_its_branch(
    chat_template_type: str, ids: list[int], mask: list[int]
) -> None:
    # AReaL's `to_tensor_dict` walks the parents of a concat-rendered call in either style.
    cache = InteractionCache(episode(chat_template_type))
    tensors = cache.export_interactions("individual")["c"].to_tensor_dict()
    assert tensors["input_ids"].tolist() == [ids]
    assert tensors["loss_mask"].tolist() == [mask]
    assert tensors["logprobs"].tolist()[0][2] == pytest.approx(
        -0.1 if chat_template_type == "concat" else 0.0
    )


def test_a_broken_prefix_fails_a_concat_export_and_an_individual_copys_tensors() -> None:
    items = episode()
    items["c"].model_response = response([10, 11, 99, 15], [16, 17])  # not a's tokens continued
    items["c"].parent, items["c"].link = items["a"], Link.PREFIX
    cache = InteractionCache(items)
    with pytest.raises(ExportMismatch, match="does not continue its parent a"):
        cache.export_interactions("concat")
    exported = cache.export_interactions("individual")
    assert exported["c"].parent is exported["a"]
    with pytest.raises(ExportMismatch, match="does not continue its parent a"):
        exported["c"].to_tensor_dict()
    assert exported["b"].to_tensor_dict()["input_ids"].tolist() == [[10, 11, 12, 13, 14]]


def test_concat_of_hf_rendered_interactions_is_a_value_error() -> None:
    cache = InteractionCache(episode(chat_template_type="hf"))
    with pytest.raises(ValueError, match="concat"):
        cache.export_interactions("concat")
    assert list(cache.export_interactions("individual")) == ["a", "b", "c"]


def test_an_unknown_export_style_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="tree"):
        InteractionCache(episode()).export_interactions("tree")


@pytest.mark.parametrize("style", ["individual", "concat"])
def test_an_empty_cache_exports_nothing(style: str) -> None:
    assert InteractionCache().export_interactions(style) == {}


def test_unknown_ids_are_none_from_get_and_key_errors_elsewhere() -> None:
    cache = InteractionCache(episode())
    assert cache.get("nope") is None
    with pytest.raises(KeyError):
        cache["nope"]
    with pytest.raises(KeyError):
        cache.set_reward("nope", 1.0)


def test_rltaps_own_cache_discounts_along_the_tree_repeatably_without_mutating() -> None:
    areal_cache, tree_cache = InteractionCache(episode()), rltap.InteractionCache()
    for name, node in episode().items():
        tree_cache[name] = node
    areal_cache.set_last_reward(10.0)
    tree_cache.set_last_reward(10.0)

    # AReaL: insertion order, so the sibling b inherits c's reward; written into the cache.
    assert rewards(areal_cache.apply_reward_discount(0.9)) == pytest.approx(
        {"a": 8.1, "b": 9.0, "c": 10.0}
    )
    # rltap: along the tree (a = 0.9 * mean(b, c)), siblings never leak; nothing is mutated.
    tree = tree_cache.apply_reward_discount(0.9)
    assert tree == pytest.approx({"a": 4.5, "b": 0.0, "c": 10.0})
    assert tree_cache.apply_reward_discount(0.9) == tree
    assert [tree_cache[name].reward for name in "abc"] == [None, None, 10.0]
