from __future__ import annotations

from typing import Any

import pytest

from rltap.tree.canonical import canonical_message, chain_hashes, tools_context

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
}


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param(
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            id="string-equals-text-part",
        ),
        pytest.param(
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            id="responses-input-text-part",
        ),
        pytest.param(
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            id="null-content-equals-empty-on-tool-call",
        ),
        pytest.param(
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {
                "role": "assistant",
                "content": [],
                "tool_calls": [
                    {
                        "id": "call_other",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"b":2,"a":1}'},
                    }
                ],
            },
            id="arguments-compared-as-json-ids-ignored",
        ),
        pytest.param(
            {
                "role": "assistant",
                "content": "x",
                "refusal": None,
                "annotations": [],
                "audio": None,
            },
            {"role": "assistant", "content": "x", "id": "msg_1", "status": "completed"},
            id="volatile-keys-ignored",
        ),
        pytest.param(
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "assistant", "content": None, "name": "math", "tool_calls": [CALL]},
            id="the-agent-name-a-framework-stamps-on-a-reply-is-ignored",
        ),
        pytest.param(
            {"role": "developer", "content": "be brief"},
            {"role": "system", "content": "be brief"},
            id="developer-is-system",
        ),
        pytest.param(
            {"role": "assistant", "content": "x", "reasoning_content": "because"},
            {"role": "assistant", "content": "x"},
            id="reasoning-not-compared",
        ),
    ],
)
def test_equivalent_serialisations_are_equal(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert canonical_message(left) == canonical_message(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param(
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi"}, id="role"
        ),
        pytest.param(
            {"role": "user", "content": "hi"}, {"role": "user", "content": "ho"}, id="text"
        ),
        pytest.param(
            {"role": "assistant", "tool_calls": [CALL]},
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "add", "arguments": '{"a": 1, "b": 3}'}}],
            },
            id="arguments",
        ),
        pytest.param(
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "user", "content": "ab"},
            id="parts-are-not-joined",
        ),
        pytest.param(
            {"role": "tool", "name": "add", "content": "3"},
            {"role": "tool", "name": "sub", "content": "3"},
            id="tool-name",
        ),
        pytest.param(
            {"role": "user", "name": "alice", "content": "hi"},
            {"role": "user", "name": "bob", "content": "hi"},
            id="user-name",
        ),
    ],
)
def test_different_messages_differ(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert canonical_message(left) != canonical_message(right)


def test_unparsable_arguments_compare_as_text() -> None:
    broken = {
        "role": "assistant",
        "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
    }
    assert canonical_message(broken) == canonical_message(dict(broken))
    other = {
        "role": "assistant",
        "tool_calls": [{"function": {"name": "f", "arguments": "{oops!"}}],
    }
    assert canonical_message(broken) != canonical_message(other)


def test_chain_hash_of_a_prefix_is_the_prefix_of_the_chain() -> None:
    messages = [{"role": "user", "content": str(i)} for i in range(5)]
    assert chain_hashes(messages)[:3] == chain_hashes(messages[:3])
    assert len(set(chain_hashes(messages))) == 5


def test_tools_context_ignores_key_order_and_none() -> None:
    a = [{"type": "function", "function": {"name": "f", "parameters": {}, "strict": None}}]
    b = [{"function": {"parameters": {}, "name": "f"}, "type": "function"}]
    assert tools_context(a) == tools_context(b)
    assert tools_context([]) is None


def test_arguments_too_deep_to_reserialise_compare_as_text() -> None:
    deep = "[" * 400 + "]" * 400
    call = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": deep}}]}
    assert canonical_message(call) == canonical_message(dict(call))
    other = {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[]"}}]}
    assert canonical_message(call) != canonical_message(other)
