"""What AReaL's own tests of its agentic layer pin (inclusionAI/AReaL at 4aef98d,
tests/experimental/openai), checked on `rltap.areal`: the chat template type set after
construction, AReaL's chunk shape of a streamed completion, duck-typed replies in the cache,
AReaL's concat prompt function and its messages, and the concat conversations of its client tests
(a branching multi-round tree, replies cut at the token limit, multi-step tool calling), whose
exports link each copy to its exported parent and train each call on its branch, over an AReaL
engine and over rltap's. `rltap`'s own names keep rltap's behaviour.

AReaL's test files are not in any registry package (the `areal` 1.0.4 sdist ships none), so these
are written here from the behaviour those tests pin (docs/switching-from-areal.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from unittest.mock import MagicMock

import pytest
import torch

from rltap.areal import ArealOpenAI, InteractionCache, InteractionWithTokenLogpReward, ModelResponse
from rltap.areal.client import concat_prompt_token_ids_with_parent
from rltap.testing.areal_engine import ScriptedArealEngine

ClientFactory = Callable[..., tuple[ArealOpenAI, ScriptedArealEngine]]  # the areal_client fixture
EngineClientFactory = Callable[..., ArealOpenAI]  # the engine_client fixture

BASE = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Start the session."},
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
    },
}
TWO_CALLS = (
    "Checking. <tool_call>\n"
    '{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Rome"}}\n</tool_call>'
)


def ask(messages: list[Any], reply: Any, question: str) -> list[Any]:
    return [*messages, reply.choices[0].message, {"role": "user", "content": question}]


@pytest.mark.parametrize("where", ["client", "completions", "responses"])
async def test_chat_template_type_set_after_construction_renders_concat(
    areal_client: ClientFactory, where: str
) -> None:
    client, engine = areal_client(["root", "a", "b"])
    assert client.chat_template_type == "hf"
    target = {"client": client, "completions": client.chat.completions}.get(where, client.responses)
    target.chat_template_type = "concat"
    assert client.chat_template_type == client.chat.completions.chat_template_type == "concat"
    assert client.responses.chat_template_type == "concat"

    root = await client.chat.completions.create(messages=BASE)
    a = await client.chat.completions.create(messages=ask(BASE, root, "Question A"))
    b = await client.chat.completions.create(messages=ask(BASE, root, "Question B"))
    leaves = client.export_interactions(style="concat")

    assert set(leaves) == {a.id, b.id}
    root_node = client.get_interaction(root.id)
    assert root_node is not None
    assert root_node.model_response is not None
    root_tokens = root_node.model_response.input_tokens + root_node.model_response.output_tokens
    assert root_node.model_response.input_tokens == engine.requests[0].input_ids
    for leaf in (a, b):
        mask = leaves[leaf.id].to_tensor_dict()["loss_mask"].squeeze(0).tolist()
        node = client.get_interaction(leaf.id)
        assert node is not None
        assert node.model_response is not None
        assert node.model_response.input_tokens[: len(root_tokens)] == root_tokens
        prompt_len, output_len = node.model_response.input_len, node.model_response.output_len
        root_in, root_out = root_node.model_response.input_len, root_node.model_response.output_len
        assert mask == (
            [0] * root_in
            + [1] * root_out
            + [0] * (prompt_len - root_in - root_out)
            + [1] * output_len
        )


async def test_an_unsupported_chat_template_type_is_a_value_error(
    areal_client: ClientFactory,
) -> None:
    client, _ = areal_client([])
    with pytest.raises(ValueError, match="Unsupported chat_template_type 'jinja'"):
        client.chat_template_type = "jinja"
    assert client.chat_template_type == "hf"


async def test_a_stream_has_areals_chunk_shape(areal_client: ClientFactory) -> None:
    client, engine = areal_client([TWO_CALLS])
    stream = await client.chat.completions.create(messages=BASE, tools=[WEATHER], stream=True)
    chunks = [chunk async for chunk in stream]

    first, *middle, last = chunks
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.content == ""
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Checking."
    calls = [c.choices[0].delta.tool_calls for c in middle if c.choices[0].delta.tool_calls]
    assert [len(call) for call in calls] == [1, 1]  # one chunk per tool call, each whole
    deltas = [call[0] for call in calls]
    assert [d.index for d in deltas] == [0, 1]
    assert all(d.id and d.type == "function" for d in deltas)
    assert [d.function and d.function.name for d in deltas] == ["get_weather"] * 2
    arguments = [json.loads(d.function.arguments or "") for d in deltas if d.function]
    assert arguments == [{"location": "Paris"}, {"location": "Rome"}]
    assert last.choices[0].finish_reason == "tool_calls"
    assert last.usage is not None
    assert last.usage.prompt_tokens == len(engine.requests[0].input_ids)
    node = client.get_interaction(last.id)
    assert node is not None
    assert node.model_response is not None
    assert last.usage.completion_tokens == node.model_response.output_len
    assert all(chunk.usage is None for chunk in chunks[:-1])
    assert {chunk.id for chunk in chunks} == {last.id}
    # The recorded reply has the same tool calls, ids included, as the stream gave.
    message = (node.output_message_list or [{}])[0]
    assert [call["id"] for call in message["tool_calls"]] == [d.id for d in deltas]


async def test_a_stream_keeps_the_callers_stream_options(areal_client: ClientFactory) -> None:
    client, _ = areal_client(["four"])
    stream = await client.chat.completions.create(
        messages=BASE, stream=True, stream_options={"include_usage": False}
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].usage is not None  # AReaL's last chunk always carries usage
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "four"


def mock_interaction(
    messages: list[dict[str, Any]], text: str, reward: float | None = None
) -> InteractionWithTokenLogpReward:
    """An interaction stored as AReaL's cache tests store one: its reply a MagicMock."""
    reply = MagicMock()
    reply.input_tokens = [1, 2, 3]
    reply.output_tokens = [4, 5]
    return InteractionWithTokenLogpReward(
        model_response=reply,
        reward=reward,
        messages=messages,
        output_message_list=[{"role": "assistant", "content": text}],
        chat_template_type="concat",
    )


def test_duck_typed_replies_link_discount_and_export() -> None:
    a = [{"role": "user", "content": "A"}]
    cache = InteractionCache()
    cache["1"] = mock_interaction(a, "B")
    cache["2"] = mock_interaction([*a, {"role": "assistant", "content": "B"}, *a], "D", 1.0)
    cache["3"] = mock_interaction(a, "E")
    assert cache["2"].parent is cache["1"]
    assert cache["3"].parent is None

    leaves = cache.export_interactions("concat")
    assert list(leaves) == ["2", "3"]
    assert leaves["2"].parent is cache["1"]
    assert list(cache.export_interactions("individual")) == ["1", "2", "3"]
    cache.apply_reward_discount(turn_discount=0.9)
    assert {key: node.reward for key, node in cache.items()} == {"1": 0.9, "2": 1.0, "3": 0.0}


@pytest.mark.parametrize("style", ["individual", "concat"])
def test_duck_typed_replies_have_no_tensors(style: str) -> None:
    cache = InteractionCache()
    cache["1"] = mock_interaction([{"role": "user", "content": "A"}], "B", 1.0)
    (exported,) = cache.export_interactions(style).values()
    with pytest.raises(ValueError, match="interaction 1's model_response is a MagicMock"):
        exported.to_tensor_dict()


def test_a_readable_reply_in_a_cache_with_duck_typed_ones_keeps_its_tensors() -> None:
    cache = InteractionCache()
    cache["mock"] = mock_interaction([{"role": "user", "content": "A"}], "B")
    real = ModelResponse(
        input_tokens=[7, 8], output_tokens=[9], output_logprobs=[-0.5], output_versions=[3]
    )
    cache["real"] = InteractionWithTokenLogpReward(
        model_response=real,
        messages=[{"role": "user", "content": "Z"}],
        output_message_list=[{"role": "assistant", "content": "Y"}],
        chat_template_type="concat",
    )
    tensors = cache.export_interactions("concat")["real"].to_tensor_dict()
    assert tensors["input_ids"].tolist() == [[7, 8, 9]]
    assert tensors["logprobs"].tolist() == [[0.0, 0.0, -0.5]]
    assert tensors["versions"].tolist() == [[-1, -1, 3]]


def test_concat_prompt_without_parent_is_the_templates_rendering(qwen_tokenizer: Any) -> None:
    ids = concat_prompt_token_ids_with_parent(BASE, None, qwen_tokenizer, tools=[WEATHER])
    expected = qwen_tokenizer.apply_chat_template(
        BASE, tools=[WEATHER], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert ids == list(expected)


def test_concat_prompt_after_a_tool_call_matches_the_whole_rendering(qwen_tokenizer: Any) -> None:
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
            }
        ],
    }
    template = qwen_tokenizer.apply_chat_template
    prompt = list(template(BASE, tools=[WEATHER], add_generation_prompt=True, return_dict=False))
    with_call = template([*BASE, call], tools=[WEATHER], tokenize=False)
    reply_text = with_call[len(qwen_tokenizer.decode(prompt)) :].rstrip("\n")
    output = qwen_tokenizer.encode(reply_text, add_special_tokens=False)
    assert output[-1] == qwen_tokenizer.eos_token_id  # the reply ends its turn, as a model's
    parent = InteractionWithTokenLogpReward(
        messages=BASE,
        model_response=ModelResponse(
            input_tokens=prompt,
            output_tokens=output,
            output_logprobs=[0.0] * len(output),
            output_versions=[0] * len(output),
        ),
        output_message_list=[call],
        chat_template_type="concat",
    )
    result = [{"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]

    ids = concat_prompt_token_ids_with_parent(result, parent, qwen_tokenizer, tools=[WEATHER])

    whole = template(
        [*BASE, call, *result], tools=[WEATHER], add_generation_prompt=True, return_dict=False
    )
    assert ids == list(whole)
    assert ids[: len(prompt) + len(output)] == prompt + output


def test_concat_prompt_of_a_parent_without_reply_is_areals_value_error(
    qwen_tokenizer: Any,
) -> None:
    parent = InteractionWithTokenLogpReward(messages=BASE)
    with pytest.raises(ValueError, match="Parent interaction has no model_response"):
        concat_prompt_token_ids_with_parent(BASE, parent, qwen_tokenizer)


def branch_mask(branch: list[InteractionWithTokenLogpReward]) -> list[int]:
    """AReaL's tests' loss mask for the last call of `branch` (root first): each call's new prompt
    tokens 0, its reply 1."""
    mask: list[int] = []
    for node in branch:
        response = node.model_response
        assert response is not None
        mask += [0] * (response.input_len - len(mask)) + [1] * response.output_len
    return mask


def assert_exported_tree(
    exported: dict[str, InteractionWithTokenLogpReward], parents: dict[str, str | None]
) -> None:
    """Each exported copy's parent is the exported copy of its parent, and its tensors its
    branch (what AReaL's tests check on the `individual` export of a concat conversation)."""
    assert list(exported) == list(parents)
    for child, parent in parents.items():
        if parent is None:
            assert exported[child].parent is None
        else:
            assert exported[child].parent is exported[parent]
        branch = [exported[child]]
        while (above := branch[-1].parent) is not None:
            branch.append(above)
        mask = exported[child].to_tensor_dict()["loss_mask"].squeeze(0).tolist()
        assert mask == branch_mask(branch[::-1])


async def test_a_multi_round_concat_tree_exports_linked_copies(
    engine_client: EngineClientFactory,
) -> None:
    client = engine_client(["Root.", "A.", "A1.", "A2.", "B.", "B1."])
    client.chat_template_type = "concat"
    create = client.chat.completions.create
    root = await create(messages=BASE, max_completion_tokens=64)
    ask_a, ask_b = ask(BASE, root, "Question A"), ask(BASE, root, "Question B")
    a = await create(messages=ask_a)
    a1 = await create(messages=ask(ask_a, a, "Follow-up A1"))
    a2 = await create(messages=ask(ask_a, a, "Follow-up A2"))
    b = await create(messages=ask_b)
    b1 = await create(messages=ask(ask_b, b, "Follow-up B1"))
    for leaf, reward in ((a1, 2.0), (a2, 1.5), (b1, 3.0)):
        client.set_reward(leaf.id, reward)

    leaves = client.export_interactions(style="concat")
    every = client.export_interactions(style="individual")

    assert set(leaves) == {a1.id, a2.id, b1.id}
    parents = {root.id: None, a.id: root.id, a1.id: a.id, a2.id: a.id, b.id: root.id}
    assert_exported_tree(every, {**parents, b1.id: b.id})
    assert [every[c.id].reward for c in (root, a, a1, a2, b, b1)] == [None, None, 2, 1.5, None, 3]
    for leaf, parent in ((a1, a), (a2, a), (b1, b)):
        # A leaf's parent is not in the concat export: as AReaL's, the cached interaction.
        assert leaves[leaf.id].parent is client.get_interaction(parent.id)
        assert torch.equal(
            leaves[leaf.id].to_tensor_dict()["input_ids"],
            every[leaf.id].to_tensor_dict()["input_ids"],
        )


async def test_a_concat_conversation_cut_at_the_token_limit_exports_linked_copies(
    engine_client: EngineClientFactory,
) -> None:
    long_reply = "This reply goes on for far longer than the eight tokens it may have."
    client = engine_client([long_reply] * 3)
    client.chat_template_type = "concat"
    create = client.chat.completions.create
    root = await create(messages=BASE, max_completion_tokens=8)
    ask_a = ask(BASE, root, "Question A")
    a = await create(messages=ask_a, max_completion_tokens=8)
    a1 = await create(messages=ask(ask_a, a, "Follow-up A1"), max_completion_tokens=8)
    assert [c.choices[0].finish_reason for c in (root, a, a1)] == ["length"] * 3
    client.set_reward(a1.id, 2.0)

    assert list(client.export_interactions(style="concat")) == [a1.id]
    every = client.export_interactions(style="individual")
    assert_exported_tree(every, {root.id: None, a.id: root.id, a1.id: a.id})
    assert every[a1.id].reward == 2.0


async def test_multi_step_tool_calling_in_concat_exports_linked_copies(
    engine_client: EngineClientFactory,
) -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    client = engine_client([call, "Sunny.", call, "Rainy."], tool_call_parser="qwen25")
    client.chat_template_type = "concat"
    create = client.chat.completions.create
    system = [{"role": "system", "content": "You are a helpful assistant."}]
    replies: list[Any] = []
    for question, weather in (("Weather in Paris?", "sunny"), ("And in Rome?", "rainy")):
        asked = [*system, {"role": "user", "content": question}]
        calling = await create(messages=asked, tools=[WEATHER], tool_choice="auto")
        message = calling.choices[0].message
        assert calling.choices[0].finish_reason == "tool_calls"
        # AReaL's test: the reply rebuilt as a dict holding the SDK's tool call objects.
        answered = [
            *asked,
            {"role": "assistant", "content": message.content, "tool_calls": message.tool_calls},
            {"role": "tool", "content": weather, "tool_call_id": "mock_id"},
        ]
        replies += [calling, await create(messages=answered, tools=[WEATHER])]
    c_a, c_a1, c_b, c_b1 = replies
    client.set_reward(c_a1.id, 2.0)
    client.set_reward(c_b1.id, 3.0)

    assert set(client.export_interactions(style="concat")) == {c_a1.id, c_b1.id}
    every = client.export_interactions(style="individual")
    assert_exported_tree(every, {c_a.id: None, c_a1.id: c_a.id, c_b.id: None, c_b1.id: c_b.id})
    assert [every[c.id].reward for c in replies] == [None, 2.0, None, 3.0]
