"""AReaL's `completion` and `response` on `rltap.areal.InteractionWithTokenLogpReward`: the SDK's
objects of the reply each call was answered with, kept on rltap's record (which names no API)
under the API's name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from openai.types.chat import ChatCompletion

from rltap.areal import ArealOpenAI, InteractionCache, InteractionWithTokenLogpReward
from rltap.record.types import InteractionWithTokenLogpReward as RecordedInteraction
from rltap.testing.areal_engine import ScriptedArealEngine

ClientFactory = Callable[..., tuple[ArealOpenAI, ScriptedArealEngine]]  # the areal_client fixture

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
# The names AReaL gives a reply after its wire API, and rltap's own before it kept them apart.
API_NAMED = {"completion", "response", "anthropic_message", "is_completion", "is_response"}


def areal_node(client: ArealOpenAI, interaction_id: str) -> InteractionWithTokenLogpReward:
    node = client.get_interaction(interaction_id)
    assert isinstance(node, InteractionWithTokenLogpReward)
    return node


async def test_a_chat_call_is_the_completion_and_a_responses_call_the_response(
    areal_client: ClientFactory,
) -> None:
    client, _ = areal_client(["4", "5"])
    completion = await client.chat.completions.create(messages=QUESTION)
    response = await client.responses.create(input="What is 2+3?")

    chat = areal_node(client, completion.id)
    assert (chat.is_completion, chat.is_response, chat.response) == (True, False, None)
    assert isinstance(chat.completion, ChatCompletion)
    assert chat.completion.model_dump() == completion.model_dump()
    answered = areal_node(client, response.id)
    assert (answered.is_completion, answered.is_response, answered.completion) == (
        False,
        True,
        None,
    )
    assert answered.response.id == response.id
    assert answered.response.output_text == response.output_text == "5"

    exported = client.export_interactions(style="individual")
    assert all(isinstance(node, InteractionWithTokenLogpReward) for node in exported.values())
    assert exported[completion.id].completion.id == completion.id
    assert exported[response.id].response.output_text == "5"


async def test_a_streamed_call_keeps_the_completion_its_chunks_made(
    areal_client: ClientFactory,
) -> None:
    client, _ = areal_client(["four"])
    stream = await client.chat.completions.create(messages=QUESTION, stream=True)
    chunks = [chunk async for chunk in stream]
    node = areal_node(client, chunks[0].id)
    assert node.completion.id == chunks[0].id
    assert node.completion.choices[0].message.content == "four"


def test_areals_keywords_and_attributes_set_the_reply_as_areals_client_does() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "4"},
            }
        ],
    }
    completion = ChatCompletion.model_validate(body)
    node = InteractionWithTokenLogpReward(completion=completion, messages=QUESTION)
    assert node.is_completion
    assert node.completion == completion
    # AReaL's client sets it on the stored interaction once the call finished.
    cache = InteractionCache()
    cache["later"] = InteractionWithTokenLogpReward(messages=QUESTION)
    stored = cache["later"]
    assert isinstance(stored, InteractionWithTokenLogpReward)
    assert not stored.is_completion
    stored.completion = completion
    assert stored.completion.choices[0].message.content == "4"
    copy = dataclasses.replace(stored, reward=1.0)
    assert type(copy) is InteractionWithTokenLogpReward
    assert copy.completion == completion
    stored.completion = None
    assert (stored.is_completion, stored.completion) == (False, None)


def test_areals_names_live_in_rltap_areal_not_on_rltaps_record() -> None:
    record_names = {field.name for field in dataclasses.fields(RecordedInteraction)}
    assert not API_NAMED & (record_names | set(dir(RecordedInteraction)))
    assert API_NAMED - {"anthropic_message"} <= set(dir(InteractionWithTokenLogpReward))
    # AReaL's class adds no state: the session's own records become it in place.
    assert dataclasses.fields(InteractionWithTokenLogpReward) == dataclasses.fields(
        RecordedInteraction
    )


def test_the_cache_keeps_a_callers_own_subclass_as_given() -> None:
    class Tagged(RecordedInteraction):
        """A caller's own interaction class."""

    cache = InteractionCache()
    cache["tagged"] = Tagged(messages=QUESTION)
    assert type(cache["tagged"]) is Tagged
