"""What counts as carrying a reply (`rltap.tree.carry`): its words in order, its tool-call ids, its
whole text relayed; not the words it took from its own prompt."""

from __future__ import annotations

from typing import Any

from rltap.tree.carry import CarryIndex, message_text, words

PROMPTS: dict[str, list[dict[str, Any]]] = {}
AGENTS: dict[str, str] = {}


def index_of(*replies: tuple[str, list[dict[str, Any]], dict[str, Any]]) -> CarryIndex:
    index = CarryIndex()
    for interaction_id, prompt, output in replies:
        PROMPTS[interaction_id], AGENTS[interaction_id] = prompt, "agent"
        index.completed(interaction_id, [output])
    return index


def carried(index: CarryIndex, *messages: dict[str, Any]) -> str | None:
    return index.carried(list(messages), PROMPTS.__getitem__, AGENTS.__getitem__, None)


ASK = [{"role": "user", "content": "start"}]
LONG = "The tide turns twice a day because the moon pulls the oceans toward it as it passes."


def test_json_and_python_repr_of_the_same_arguments_have_the_same_words() -> None:
    call = {"function": {"name": "add", "arguments": '{"a": 2, "b": "x y"}'}}
    as_repr = {"function": {"name": "add", "arguments": {"a": 2, "b": "x y"}}}
    message = {"role": "assistant", "tool_calls": [call]}
    assert words(message_text(message)) == words(message_text({**message, "tool_calls": [as_repr]}))


def test_the_reply_is_found_inside_other_text_whatever_the_role() -> None:
    index = index_of(("r1", ASK, {"role": "assistant", "content": LONG}))
    wrapped = f"<current_conversation>\nassistant: {LONG}\n</current_conversation>\nNow answer."
    assert carried(index, {"role": "user", "content": "go"}, {"role": "user", "content": wrapped})
    assert (
        carried(index, {"role": "user", "content": "go"}, {"role": "tool", "content": "x"}) is None
    )


def test_words_the_reply_repeated_from_its_prompt_carry_nothing_of_it() -> None:
    prompt = [{"role": "user", "content": "Why does the moon pull the oceans toward it?"}]
    index = index_of(("r1", prompt, {"role": "assistant", "content": LONG}))
    assert carried(index, {"role": "user", "content": "so the moon pulls the oceans"}) == "r1"
    assert carried(index, {"role": "user", "content": "does the moon pull the oceans"}) is None


def test_a_short_reply_counts_only_relayed_whole_after_the_first_turn() -> None:
    index = index_of(("r1", ASK, {"role": "assistant", "content": "Paris"}))
    first = {"role": "user", "content": "Paris"}
    assert carried(index, first) is None  # a task that happens to read like the reply
    relayed = {"role": "user", "name": "guide", "content": " Paris "}
    assert carried(index, first, relayed) == "r1"


def test_a_tool_call_id_anywhere_in_the_request_carries_its_reply() -> None:
    call = {"id": "call_5be1c0ffee", "function": {"name": "add", "arguments": "{}"}}
    index = index_of(("r1", ASK, {"role": "assistant", "content": None, "tool_calls": [call]}))
    text = "Calling tools:\n[{'id': 'call_5be1c0ffee', 'type': 'function'}]"
    assert carried(index, {"role": "assistant", "content": text}) == "r1"


def test_the_reply_carried_latest_wins() -> None:
    other = "Winds blow from high pressure to low pressure and bend with the turning earth."
    index = index_of(
        ("r1", ASK, {"role": "assistant", "content": LONG}),
        ("r2", ASK, {"role": "assistant", "content": other}),
    )
    assert carried(index, {"role": "user", "content": f"{LONG}\n{other}"}) == "r2"
    assert carried(index, {"role": "user", "content": f"{other}\n{LONG}"}) == "r1"
