"""`rltap.areal.ArealOpenAI` over an AReaL engine: AReaL 1.0.4's constructor, calls and requests,
each call recorded token for token as the engine saw and produced it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from rltap.areal import ArealOpenAI
from rltap.record.types import InteractionStatus, InteractionWithTokenLogpReward, ModelResponse
from rltap.testing.areal_engine import ScriptedArealEngine

ClientFactory = Callable[..., tuple[ArealOpenAI, ScriptedArealEngine]]  # the areal_client fixture

QUESTION = [{"role": "user", "content": "What is 2+2?"}]

# AReaL 1.0.4, areal/experimental/openai/client.py: ArealOpenAI.__init__ after `self`.
AREAL_SIGNATURE = [
    ("engine", inspect.Parameter.empty),
    ("tokenizer", inspect.Parameter.empty),
    ("tool_call_parser", "qwen"),
    ("reasoning_parser", "qwen3"),
    ("engine_max_tokens", None),
    ("chat_template_type", "hf"),
    ("lora_name", ""),
    ("kwargs", inspect.Parameter.empty),
]


def recorded(
    client: ArealOpenAI, interaction_id: str
) -> tuple[InteractionWithTokenLogpReward, ModelResponse]:
    """The interaction `interaction_id` as the client recorded it, and its engine response."""
    node = client.get_interaction(interaction_id)
    assert node is not None
    assert node.model_response is not None
    return node, node.model_response


def test_the_constructor_is_areals() -> None:
    parameters = list(inspect.signature(ArealOpenAI.__init__).parameters.values())[1:]
    assert [(p.name, p.default) for p in parameters] == AREAL_SIGNATURE
    assert parameters[-1].kind is inspect.Parameter.VAR_KEYWORD
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters[:-1])


async def test_a_call_records_what_the_engine_received_and_returned(
    areal_client: ClientFactory, qwen_tokenizer: Any
) -> None:
    client, engine = areal_client(["4"])
    completion = await client.chat.completions.create(messages=QUESTION)  # no `model`, as AReaL

    assert completion.choices[0].message.content == "4"
    (request,) = engine.requests
    # chat_template_type="hf" (AReaL's default): the tokenizer's own chat template.
    rendered = qwen_tokenizer.apply_chat_template(
        QUESTION, add_generation_prompt=True, tokenize=False
    )
    assert request.input_ids == qwen_tokenizer.encode(rendered, add_special_tokens=False)
    node, response = recorded(client, completion.id)
    assert node.chat_template_type == "hf"
    assert response.input_tokens == request.input_ids
    assert response.output_tokens == [
        *qwen_tokenizer.encode("4", add_special_tokens=False),
        qwen_tokenizer.eos_token_id,
    ]
    assert response.output_logprobs == [-1 / 2, -1 / 3]
    assert response.output_versions == [0, 0]


async def test_a_reply_message_object_continues_the_conversation_at_the_engines_version(
    areal_client: ClientFactory,
) -> None:
    client, engine = areal_client(["4", "6"])
    first = await client.chat.completions.create(messages=QUESTION)
    engine.set_version(3)
    # AReaL's examples append the reply's pydantic message as is.
    messages = [*QUESTION, first.choices[0].message, {"role": "user", "content": "And 3+3?"}]
    second = await client.chat.completions.create(messages=messages)

    node, response = recorded(client, second.id)
    assert node.parent_id == first.id
    assert node.messages[1] == {"role": "assistant", "content": "4"}
    assert response.input_tokens == engine.requests[1].input_ids
    assert response.output_logprobs == [-2 / 2, -2 / 3]
    assert response.output_versions == [3, 3]


async def test_messages_may_be_any_iterable_of_dicts(areal_client: ClientFactory) -> None:
    client, engine = areal_client(["4", "4"])
    await client.chat.completions.create(messages=tuple(QUESTION))  # AReaL takes list(messages)
    await client.chat.completions.create(messages=(message for message in QUESTION))
    assert engine.requests[0].input_ids == engine.requests[1].input_ids


@pytest.mark.parametrize(
    ("params", "max_new_tokens"),
    [
        pytest.param({}, 512, id="areal-default"),
        pytest.param({"max_tokens": 5}, 5, id="max_tokens"),
        pytest.param({"max_completion_tokens": 7}, 7, id="max_completion_tokens"),
    ],
)
async def test_the_engine_gets_areals_request(
    areal_client: ClientFactory, qwen_tokenizer: Any, params: dict[str, Any], max_new_tokens: int
) -> None:
    client, engine = areal_client(["4"], lora_name="math-lora")
    await client.chat.completions.create(messages=QUESTION, **params)
    (request,) = engine.requests
    assert request.gconfig.max_new_tokens == max_new_tokens
    assert qwen_tokenizer.eos_token_id in request.gconfig.stop_token_ids
    assert request.gconfig.lora_name == "math-lora"
    assert request.tokenizer is qwen_tokenizer


async def test_engine_max_tokens_leaves_the_reply_what_the_prompt_does_not_take(
    areal_client: ClientFactory,
) -> None:
    client, engine = areal_client(["4"], engine_max_tokens=30)
    await client.chat.completions.create(messages=QUESTION)
    (request,) = engine.requests
    assert request.gconfig.max_new_tokens == 30 - len(request.input_ids)  # AReaL's arithmetic
    assert request.gconfig.max_tokens == 30


async def test_tool_calls_are_parsed_with_areals_parser_names(
    areal_client: ClientFactory,
) -> None:
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>'
    client, _ = areal_client([call], tool_call_parser="qwen25")
    tool = {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            },
        },
    }
    completion = await client.chat.completions.create(messages=QUESTION, tools=[tool])
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (tool_call,) = choice.message.tool_calls or []
    assert tool_call.function.name == "add"
    assert tool_call.function.arguments == '{"a":2,"b":2}'


async def test_a_streamed_call_is_recorded(areal_client: ClientFactory) -> None:
    client, engine = areal_client(["four"])
    stream = await client.chat.completions.create(messages=QUESTION, stream=True)
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "four"
    (completion_id,) = {chunk.id for chunk in chunks}
    node, response = recorded(client, completion_id)
    assert node.status is InteractionStatus.COMPLETE
    assert response.input_tokens == engine.requests[0].input_ids
    assert list(client.export_interactions(style="individual")) == [completion_id]


async def test_responses_create_without_model(areal_client: ClientFactory) -> None:
    client, engine = areal_client(["4"])
    reply = await client.responses.create(input="What is 2+2?")
    assert reply.output_text == "4"
    _, response = recorded(client, reply.id)
    assert response.input_tokens == engine.requests[0].input_ids


async def test_rewards_discount_once_and_export(areal_client: ClientFactory) -> None:
    client, _ = areal_client(["4", "6"])
    first = await client.chat.completions.create(messages=QUESTION)
    messages = [*QUESTION, first.choices[0].message, {"role": "user", "content": "And 3+3?"}]
    second = await client.chat.completions.create(messages=messages)

    assert client.set_last_reward(1.0) == second.id
    discounted = client.apply_reward_discount(turn_discount=0.9)
    assert {key: node.reward for key, node in discounted.items()} == pytest.approx(
        {first.id: 0.9, second.id: 1.0}
    )
    with pytest.raises(RuntimeError, match="once"):
        client.apply_reward_discount(turn_discount=0.9)
    exported = client.export_interactions(style="individual")
    assert list(exported) == [first.id, second.id]
    assert [node.reward for node in exported.values()] == pytest.approx([0.9, 1.0])
