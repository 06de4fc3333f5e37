"""The direct client (DirectOpenAI): SDK calls recorded in process, no HTTP server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import torch

from rltap import DirectOpenAI
from rltap.chat.renderer import ChatRenderer
from rltap.client.direct import DirectTransport
from rltap.config import ChatConfig
from rltap.engines.scripted import ScriptedEngine
from rltap.protocols.openai_responses.compaction import COMPACTION_PROMPT
from rltap.record.types import ModelRequest, ModelResponse

STREAMING = [pytest.param(False, id="json"), pytest.param(True, id="stream")]


@pytest.fixture
async def engine(scripted_engine: Callable[..., ScriptedEngine]) -> AsyncIterator[ScriptedEngine]:
    engine = scripted_engine()
    yield engine
    await engine.close()


@pytest.fixture
async def client(engine: ScriptedEngine, renderer: ChatRenderer) -> AsyncIterator[DirectOpenAI]:
    client = DirectOpenAI(engine=engine, tokenizer=renderer.tokenizer)
    yield client
    await client.close()


async def chat(client: DirectOpenAI, messages: list[Any], *, stream: bool) -> tuple[str, str]:
    """One chat completion; returns (id, reply text)."""
    if not stream:
        completion = await client.chat.completions.create(model="tiny", messages=messages)
        return completion.id, completion.choices[0].message.content or ""
    chunks = await client.chat.completions.create(model="tiny", messages=messages, stream=True)
    ids, text = set(), ""
    async for chunk in chunks:
        ids.add(chunk.id)
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    (completion_id,) = ids
    return completion_id, text


async def respond(client: DirectOpenAI, *, stream: bool, **request: Any) -> tuple[str, str]:
    """One Responses API call; returns (id, output text)."""
    if not stream:
        response = await client.responses.create(model="tiny", **request)
        return response.id, response.output_text
    events = await client.responses.create(model="tiny", stream=True, **request)
    completed = [event.response async for event in events if event.type == "response.completed"]
    (response,) = completed
    return response.id, response.output_text


@pytest.mark.parametrize("stream", STREAMING)
async def test_chat_turns_are_recorded_as_a_chain_and_discounted(
    client: DirectOpenAI, stream: bool
) -> None:
    messages: list[Any] = []
    ids = []
    for turn in range(3):
        messages.append({"role": "user", "content": f"question {turn}"})
        reply_id, text = await chat(client, messages, stream=stream)
        assert text == f"Turn {turn}: you said: question {turn}"
        messages.append({"role": "assistant", "content": text})
        ids.append(reply_id)

    parents = [client.get_interaction(reply_id).parent_id for reply_id in ids]
    assert parents == [None, ids[0], ids[1]]
    assert client.set_last_reward(1.0) == ids[2]
    discounted = client.apply_reward_discount(turn_discount=0.9)
    assert discounted == pytest.approx({ids[0]: 0.81, ids[1]: 0.9, ids[2]: 1.0})

    individual = client.export_interactions(style="individual")
    assert list(individual) == ids
    assert [node.reward for node in individual.values()] == pytest.approx([0.81, 0.9, 1.0])

    concat = client.export_interactions(style="concat")
    assert list(concat) == [ids[2]]
    leaf = concat[ids[2]]
    assert leaf.reward == pytest.approx(1.0)
    last = client.get_interaction(ids[2]).model_response
    assert last is not None
    sequence = leaf.token_sequence()
    assert sequence.input_ids == last.input_tokens + last.output_tokens
    generated = [client.get_interaction(i).model_response for i in ids]
    assert sum(sequence.loss_mask) == sum(r.output_len for r in generated if r is not None)


@pytest.mark.parametrize("stream", STREAMING)
async def test_responses_are_recorded_with_parents_and_rewards(
    client: DirectOpenAI, stream: bool
) -> None:
    first_id, first_text = await respond(client, stream=stream, input="hello")
    second_id, second_text = await respond(
        client, stream=stream, input="and again", previous_response_id=first_id
    )

    assert first_text == "Turn 0: you said: hello"
    assert second_text == "Turn 1: you said: and again"
    assert client.get_interaction(second_id).parent_id == first_id
    client.set_reward(first_id, 0.5)
    client.set_reward(second_id, 1.0)
    # own reward + discount x the child's
    assert client.apply_reward_discount(turn_discount=0.5) == pytest.approx(
        {first_id: 1.0, second_id: 1.0}
    )
    exported = client.export_interactions(style="individual")
    assert {i: node.reward for i, node in exported.items()} == pytest.approx(
        {first_id: 1.0, second_id: 1.0}
    )


async def test_recorded_tokens_and_logprobs_are_the_engines(
    client: DirectOpenAI, engine: ScriptedEngine, tiny_model: Any, renderer: ChatRenderer
) -> None:
    chat_id, chat_text = await chat(client, [{"role": "user", "content": "hi"}], stream=True)
    engine.set_version(3)
    response_id, response_text = await respond(client, stream=False, input="bye")

    end_of_turn = renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for interaction_id, text, version in ((chat_id, chat_text, 0), (response_id, response_text, 3)):
        response = client.get_interaction(interaction_id).model_response
        assert response is not None
        expected = renderer.tokenizer.encode(text, add_special_tokens=False)
        assert response.output_tokens == [*expected, end_of_turn]
        assert response.output_versions == [version] * response.output_len
        # A fresh forward pass over the recorded prompt + output gives the recorded logprobs,
        # so the recorded prompt is exactly what the engine consumed.
        ids = torch.tensor([response.input_tokens + response.output_tokens])
        with torch.no_grad():
            logprobs = torch.log_softmax(tiny_model(input_ids=ids).logits[0].float(), dim=-1)
        positions = torch.arange(response.input_len - 1, ids.shape[1] - 1)
        fresh = logprobs[positions, ids[0, positions + 1]]
        recorded = torch.tensor(response.output_logprobs)
        assert torch.allclose(fresh, recorded, atol=1e-5, rtol=0)


async def test_the_direct_clients_config_cuts_max_tokens_and_refuses_images(
    engine: ScriptedEngine, renderer: ChatRenderer
) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages: Any = [{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]
    client = DirectOpenAI(
        engine=engine, tokenizer=renderer.tokenizer, chat=ChatConfig(max_context=256)
    )
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(model="tiny", messages=messages)
    assert "'image_url' at messages[0].content[1]" in info.value.message
    # max_tokens beyond the context left is cut to fit.
    completion = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=64000
    )
    assert completion.choices[0].finish_reason == "stop"
    with pytest.raises(openai.NotFoundError):  # a sub-path of a route is no generation
        await client.post("/chat/completions/extra", cast_to=object, body={})
    await client.close()

    lenient = DirectOpenAI(
        engine=engine,
        tokenizer=renderer.tokenizer,
        chat=ChatConfig(max_context=256, strict_max_tokens=True, drop_unsupported_content=True),
    )
    completion = await lenient.chat.completions.create(model="tiny", messages=messages)
    assert completion.choices[0].finish_reason == "stop"
    assert lenient.get_interaction(completion.id).messages == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]
    with pytest.raises(openai.BadRequestError) as strict:
        await lenient.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=64000
        )
    assert strict.value.code == "context_length_exceeded"
    await lenient.close()


async def test_the_direct_client_samples_with_the_chat_sections_defaults(
    engine: ScriptedEngine, renderer: ChatRenderer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rltap serve --default-temperature --default-max-tokens` reach a direct client's engine
    requests too: it takes the same chat section as the proxy."""
    asked: list[ModelRequest] = []
    generate = engine.generate

    async def recorded(request: ModelRequest) -> ModelResponse:
        asked.append(request)
        return await generate(request)

    monkeypatch.setattr(engine, "generate", recorded)
    chat = ChatConfig(default_temperature=0.25, default_max_tokens=7)
    client = DirectOpenAI(engine=engine, tokenizer=renderer.tokenizer, chat=chat)
    hi: Any = [{"role": "user", "content": "hi"}]
    await client.chat.completions.create(model="tiny", messages=hi)
    await client.chat.completions.create(
        model="tiny",
        messages=hi,
        temperature=0.5,
        max_tokens=3,  # type: ignore[arg-type]
    )
    await client.close()
    assert [(r.temperature, r.max_new_tokens) for r in asked] == [(0.25, 7), (0.5, 3)]


async def test_agents_named_by_header_are_recorded_and_exported_by_agent(
    client: DirectOpenAI,
) -> None:
    first = await client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"X-Rltap-Agent": "triage"},
    )
    messages: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "more"},
    ]
    second = await client.chat.completions.create(
        model="tiny", messages=messages, extra_headers={"X-Rltap-Agent": "expert"}
    )
    client.set_last_reward(1.0)
    handoff = client.get_interaction(second.id)
    assert (handoff.agent_id, str(handoff.link), handoff.parent_id) == (
        "expert",
        "handoff",
        first.id,
    )
    exported = client.export_interactions(
        reward_discount=0.5, link_factors={"handoff": 0.5}, agents=["triage"]
    )
    assert list(exported) == [first.id]
    assert exported[first.id].reward == pytest.approx(0.25)
    with pytest.raises(openai.BadRequestError, match="X-Rltap-Agent"):
        await client.chat.completions.create(
            model="tiny", messages=messages, extra_headers={"X-Rltap-Agent": "a" * 300}
        )


# -- the APIs' other routes, served in process from the same declarations as the proxy's ------


def assert_openai_error(error: openai.APIStatusError, param: str | None, needle: str) -> None:
    assert isinstance(error.body, dict)
    assert set(error.body) == {"message", "type", "param", "code"}  # the SDK unwraps "error"
    assert error.body["param"] == param
    assert needle in error.body["message"]


@pytest.mark.parametrize("stream", STREAMING)
async def test_responses_retrieve_returns_the_response_as_answered(
    client: DirectOpenAI, stream: bool
) -> None:
    response_id, text = await respond(client, stream=stream, input="keep me")
    retrieved = await client.responses.retrieve(response_id)
    assert (retrieved.id, retrieved.status) == (response_id, "completed")
    assert retrieved.output_text == text == "Turn 0: you said: keep me"

    completion_id, _ = await chat(client, [{"role": "user", "content": "hi"}], stream=False)
    for unknown in ("resp_unknown", completion_id):  # a chat completion is no stored response
        with pytest.raises(openai.NotFoundError) as caught:
            await client.responses.retrieve(unknown)
        assert_openai_error(caught.value, "response_id", unknown)


async def test_conversations_create_list_update_and_delete(client: DirectOpenAI) -> None:
    conversation = await client.conversations.create(
        items=[{"role": "user", "content": "first"}], metadata={"topic": "t"}
    )
    assert conversation.id.startswith("conv_")
    assert conversation.metadata == {"topic": "t"}
    added = await client.conversations.items.create(
        conversation.id,
        items=[{"role": "assistant", "content": "second"}, {"role": "user", "content": "3"}],
    )
    assert [item.type for item in added.data] == ["message", "message"]
    # Three items over pages of two: the SDK follows the `after` cursor.
    pages = client.conversations.items.list(conversation.id, order="asc", limit=2)
    ascending = [item async for item in pages]
    texts = [item.content[0].text for item in ascending]  # type: ignore[union-attr]
    assert texts == ["first", "second", "3"]
    newest = await client.conversations.items.list(conversation.id, limit=1)
    assert ([item.id for item in newest.data], newest.has_more) == ([ascending[2].id], True)

    item = await client.conversations.items.retrieve(
        ascending[1].id, conversation_id=conversation.id
    )
    assert item.id == ascending[1].id
    await client.conversations.items.delete(ascending[1].id, conversation_id=conversation.id)
    left = [item.id async for item in client.conversations.items.list(conversation.id)]
    assert left == [ascending[2].id, ascending[0].id]
    with pytest.raises(openai.BadRequestError) as bad:
        await client.conversations.items.list(conversation.id, limit=101)
    assert_openai_error(bad.value, "limit", "between 1 and 100")
    with pytest.raises(openai.BadRequestError) as hosted:
        await client.conversations.items.create(
            conversation.id,
            items=[{"type": "web_search_call", "id": "w"}],  # type: ignore[list-item]
        )
    assert_openai_error(hosted.value, "items[0].type", "web_search_call")

    updated = await client.conversations.update(conversation.id, metadata={"topic": "u"})
    assert updated.metadata == {"topic": "u"}
    assert (await client.conversations.retrieve(conversation.id)).metadata == {"topic": "u"}
    deleted = await client.conversations.delete(conversation.id)
    assert (deleted.id, deleted.deleted) == (conversation.id, True)
    with pytest.raises(openai.NotFoundError) as gone:
        await client.conversations.retrieve(conversation.id)
    assert_openai_error(gone.value, None, conversation.id)


async def test_conversations_are_the_clients_own(
    client: DirectOpenAI, engine: ScriptedEngine, renderer: ChatRenderer
) -> None:
    conversation = await client.conversations.create()
    other = DirectOpenAI(engine=engine, tokenizer=renderer.tokenizer)
    with pytest.raises(openai.NotFoundError):
        await other.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError) as caught:
        await other.responses.create(model="tiny", conversation=conversation.id, input="x")
    assert_openai_error(caught.value, "conversation", conversation.id)
    await other.close()


@pytest.mark.parametrize("stream", STREAMING)
async def test_a_response_in_a_conversation_reads_and_extends_it(
    client: DirectOpenAI, stream: bool
) -> None:
    conversation = await client.conversations.create(items=[{"role": "user", "content": "hello"}])
    first_id, first_text = await respond(
        client, stream=stream, conversation=conversation.id, input="first"
    )
    second_id, second_text = await respond(
        client, stream=stream, conversation={"id": conversation.id}, input="second"
    )
    assert second_text == "Turn 1: you said: second"

    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    summary = [(item.role, item.content[0].text) for item in items]  # type: ignore[union-attr]
    assert summary == [
        ("user", "hello"),
        ("user", "first"),
        ("assistant", first_text),
        ("user", "second"),
        ("assistant", second_text),
    ]
    # The conversation's history is the first reply's prompt and output: one token sequence.
    assert client.get_interaction(second_id).parent_id == first_id
    with pytest.raises(openai.BadRequestError) as both:
        await client.responses.create(
            model="tiny", conversation=conversation.id, previous_response_id=first_id, input="y"
        )
    assert_openai_error(both.value, "conversation", "cannot be used together")


async def test_compact_summarises_with_a_recorded_generation(client: DirectOpenAI) -> None:
    history: list[Any] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "reply one"},
        {"role": "user", "content": "two"},
    ]
    compacted = await client.responses.compact(model="tiny", input=history)
    assert compacted.object == "response.compaction"
    *users, compaction = compacted.output
    assert [u.content[0].text for u in users] == ["one", "two"]  # type: ignore[union-attr]
    assert compaction.type == "compaction"
    summarised = client.get_interaction(compacted.id)
    assert summarised.messages[-1] == {"role": "user", "content": COMPACTION_PROMPT}
    assert compaction.encrypted_content == f"Turn 1: you said: {COMPACTION_PROMPT}"  # type: ignore[union-attr]
    assert summarised.model_response is not None
    assert compacted.usage.output_tokens == summarised.model_response.output_len
    with pytest.raises(openai.BadRequestError) as nothing:
        await client.responses.compact(model="tiny")
    assert_openai_error(nothing.value, "input", "")


async def test_a_route_no_api_declares_is_a_404(client: DirectOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await client.models.list()
    assert_openai_error(caught.value, None, "GET /v1/models")


async def test_an_anthropic_sdk_on_the_transport_counts_tokens(
    client: DirectOpenAI, renderer: ChatRenderer
) -> None:
    """No Anthropic direct client exists; `DirectTransport` answers its count_tokens all the
    same, declared once with the Messages API (`rltap.protocols.anthropic_messages`)."""
    transport = DirectTransport(client.session)
    async with anthropic.AsyncAnthropic(
        api_key="direct",
        base_url="http://rltap.direct",
        http_client=httpx2.AsyncClient(transport=transport),
        max_retries=0,
    ) as claude:
        request: dict[str, Any] = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "count me"}],
        }
        counted = await claude.messages.count_tokens(**request)
        reply = await claude.messages.create(max_tokens=16, **request)
        assert reply.usage.input_tokens == counted.input_tokens > 0
        with pytest.raises(anthropic.BadRequestError) as bad:
            await claude.messages.count_tokens(model="tiny", messages=[])
        assert bad.value.body["type"] == "error"  # type: ignore[index]
