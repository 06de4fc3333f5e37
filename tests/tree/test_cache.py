from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import pytest

from rltap.record.errors import Conflict, InteractionNotFound, InvalidReward
from rltap.record.types import InteractionStatus, InteractionWithTokenLogpReward, ModelResponse
from rltap.tree.cache import InteractionCache
from rltap.tree.canonical import tools_context

Record = Callable[..., InteractionWithTokenLogpReward]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def test_first_call_has_no_parent(record: Record) -> None:
    assert record([user("hi")], "hello").parent is None


def test_next_turn_links_to_the_previous_reply(record: Record) -> None:
    first = record([user("hi")], "hello")
    second = record([user("hi"), assistant("hello"), user("how are you?")], "fine")
    assert second.parent is first


def test_parent_is_the_longest_matching_prefix(record: Record) -> None:
    a = record([user("hi")], "hello")
    b = record([user("hi"), assistant("hello"), user("q2")], "a2")
    c = record([user("hi"), assistant("hello"), user("q2"), assistant("a2"), user("q3")], "a3")
    assert (a.parent, b.parent, c.parent) == (None, a, b)


def test_history_reserialised_by_the_framework_still_matches(cache: InteractionCache) -> None:
    call = {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    first = cache.add(InteractionWithTokenLogpReward(messages=[user("go")]))
    response = ModelResponse(
        input_tokens=[1], output_tokens=[2], output_logprobs=[0.0], output_versions=[0]
    )
    proxy_output = {"role": "assistant", "content": None, "tool_calls": [call]}
    cache.complete(first.interaction_id, response, [proxy_output])
    # What a framework like CAMEL sends back: "" content, text parts, its own ids and spacing.
    reserialised = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": '{ "x" : 1 }'}}],
    }
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        reserialised,
        {"role": "tool", "tool_call_id": "x", "content": "1"},
    ]
    assert cache.find_parent(messages) is first


def test_a_different_branch_point_gives_a_sibling(record: Record) -> None:
    root = record([user("hi")], "hello")
    left = record([user("hi"), assistant("hello"), user("left")], "l")
    right = record([user("hi"), assistant("hello"), user("right")], "r")
    assert left.parent is root
    assert right.parent is root


def test_identical_conversations_link_to_the_latest(record: Record) -> None:
    record([user("hi")], "hello")
    second = record([user("hi")], "hello")
    child = record([user("hi"), assistant("hello"), user("more")], "x")
    assert child.parent is second


def test_in_flight_calls_are_not_parents(cache: InteractionCache) -> None:
    cache.add(InteractionWithTokenLogpReward(messages=[user("hi")]))
    assert cache.find_parent([user("hi"), assistant("hello"), user("x")]) is None


def test_failed_calls_are_not_parents(cache: InteractionCache) -> None:
    node = cache.add(InteractionWithTokenLogpReward(messages=[user("hi")]))
    cache.fail(node.interaction_id, "engine died")
    assert node.status is InteractionStatus.FAILED
    assert cache.find_parent([user("hi"), assistant("")]) is None


def test_other_tools_do_not_link(cache: InteractionCache) -> None:
    tools = tools_context([{"type": "function", "function": {"name": "f"}}])
    node = cache.add(InteractionWithTokenLogpReward(messages=[user("hi")]), context=tools)
    response = ModelResponse(
        input_tokens=[1], output_tokens=[2], output_logprobs=[0.0], output_versions=[0]
    )
    cache.complete(node.interaction_id, response, [assistant("a")])
    follow_up = [user("hi"), assistant("a"), user("b")]
    assert cache.find_parent(follow_up, context=tools) is node
    assert cache.find_parent(follow_up) is None


def test_seed_style_setitem_records_and_links(cache: InteractionCache) -> None:
    response = ModelResponse(
        input_tokens=[1], output_tokens=[2], output_logprobs=[0.0], output_versions=[0]
    )
    first = InteractionWithTokenLogpReward(
        messages=[user("hi")],
        model_response=response,
        output_message_list=[assistant("a")],
        status=InteractionStatus.COMPLETE,
    )
    cache["chatcmpl-1"] = first
    assert list(cache) == ["chatcmpl-1"]
    assert cache.find_parent([user("hi"), assistant("a"), user("c")]) is first


def test_duplicate_ids_conflict(cache: InteractionCache) -> None:
    cache.add(InteractionWithTokenLogpReward(messages=[user("a")], interaction_id="x"))
    with pytest.raises(Conflict):
        cache.add(InteractionWithTokenLogpReward(messages=[user("b")], interaction_id="x"))


def test_concurrent_inserts_keep_the_tree_consistent(cache: InteractionCache) -> None:
    root = cache.add(InteractionWithTokenLogpReward(messages=[user("q")]))
    response = ModelResponse(
        input_tokens=[1], output_tokens=[2], output_logprobs=[0.0], output_versions=[0]
    )
    cache.complete(root.interaction_id, response, [assistant("a")])
    barrier = threading.Barrier(8)

    def branch(worker: int) -> None:
        barrier.wait()
        for turn in range(50):
            messages = [user("q"), assistant("a"), user(f"w{worker}-t{turn}")]
            node = cache.add(InteractionWithTokenLogpReward(messages=messages))
            assert node.parent is root
            child = ModelResponse(
                input_tokens=[1, 2, 3],
                output_tokens=[4],
                output_logprobs=[0.0],
                output_versions=[0],
            )
            cache.complete(node.interaction_id, child, [assistant(f"r{worker}-{turn}")])

    threads = [threading.Thread(target=branch, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 1 + 8 * 50
    assert len(cache.children(root.interaction_id)) == 8 * 50
    assert all(node.is_complete for node in cache.values())


def test_set_reward_by_id_and_last(record: Record, cache: InteractionCache) -> None:
    a = record([user("hi")], "hello")
    b = record([user("hi"), assistant("hello"), user("x")], "y")
    cache.set_reward(a.interaction_id, 0.5)
    assert cache.set_last_reward(2) == b.interaction_id
    assert (a.reward, b.reward) == (0.5, 2.0)
    assert cache.total_reward == 2.5


def test_last_reward_goes_to_the_last_completed_not_the_last_started(
    cache: InteractionCache,
) -> None:
    slow = cache.add(InteractionWithTokenLogpReward(messages=[user("slow")]))
    fast = cache.add(InteractionWithTokenLogpReward(messages=[user("fast")]))
    response = ModelResponse(
        input_tokens=[1], output_tokens=[2], output_logprobs=[0.0], output_versions=[0]
    )
    cache.complete(fast.interaction_id, response, [assistant("f")])
    assert cache.set_last_reward(1.0) == fast.interaction_id
    assert slow.reward is None


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(math.nan, id="nan"),
        pytest.param(math.inf, id="inf"),
        pytest.param(-math.inf, id="-inf"),
        pytest.param("1.0", id="string"),
        pytest.param(None, id="none"),
        pytest.param(True, id="bool"),
        pytest.param(1e300, id="beyond-float32"),
    ],
)
def test_invalid_rewards_are_refused(record: Record, cache: InteractionCache, bad: object) -> None:
    node = record([user("hi")], "hello")
    with pytest.raises(InvalidReward):
        cache.set_reward(node.interaction_id, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidReward):
        cache.set_last_reward(bad)  # type: ignore[arg-type]
    assert node.reward is None


def test_unknown_interaction_is_not_found(cache: InteractionCache) -> None:
    with pytest.raises(InteractionNotFound):
        cache.set_reward("nope", 1.0)
    with pytest.raises(InteractionNotFound):
        cache.set_last_reward(1.0)
