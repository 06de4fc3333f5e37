"""Stop strings end a reply on every API and engine, and the APIs say which one did.

The text ends right before the stop string (a space before it kept), as OpenAI, Anthropic and
vLLM return it, streamed too: a stop string split across tokens never shows in part. The recorded
tokens keep it (they are what the engine produced), and the next call, which sends the cut text
back, continues them. Anthropic reports `stop_reason: "stop_sequence"` with the matched
`stop_sequence` (Messages never asks for logprobs, which the match once depended on); Chat ends
with `stop` (Responses has no stop strings). Checked with the scripted engine (a fixed reply) and
with the embedded engine running the tiny model, streamed and not.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import anthropic
import httpx2
import pytest
from clients import anthropic_client, openai_client, sse_data

from rltap.chat.renderer import ChatRenderer
from rltap.client.proxy import interactions_from_export
from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.engines.transformers import TransformersEngine
from rltap.record.types import Link
from rltap.testing.proxy import RunningProxy, start_test_proxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]
REPLY = "The answer is 42. Observation: the tool said so. END of reply"


def _fixed_reply(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    return REPLY


@pytest.fixture
async def scripted(make_proxy: ProxyFactory) -> RunningProxy:
    # One token a chunk: the tokens of " Observation" and ":" arrive apart.
    return await make_proxy(_fixed_reply, token_delay=0.001)


async def _messages_reply(
    client: anthropic.AsyncAnthropic, stop: list[str], stream: bool, **extra: Any
) -> anthropic.types.Message:
    request: dict[str, Any] = {
        "model": "tiny",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "go"}],
        "stop_sequences": stop,
        **extra,
    }
    if not stream:
        return await client.messages.create(**request)
    async with client.messages.stream(**request) as events:
        return await events.get_final_message()


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_messages_reports_the_stop_sequence_that_matched(
    scripted: RunningProxy, http2: httpx2.AsyncClient, stream: bool
) -> None:
    _, key = await scripted.start_session()
    client = anthropic_client(scripted, key, http2)
    message = await _messages_reply(client, ["END", "Observation:"], stream)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "Observation:")
    (text,) = message.content
    assert text.type == "text"
    assert text.text == "The answer is 42. "
    # A stop string the reply never reaches: the turn ends as usual.
    plain = await _messages_reply(client, ["NEVER"], stream)
    assert (plain.stop_reason, plain.stop_sequence) == ("end_turn", None)


async def test_messages_streams_no_part_of_the_stop_sequence(scripted: RunningProxy) -> None:
    _, key = await scripted.start_session()
    body = {
        "model": "tiny",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "go"}],
        "stop_sequences": ["ation: the"],  # from the middle of " Observation", over 3 tokens
        "stream": True,
    }
    response = await scripted.session_post(key, "/v1/messages", body)
    assert response.status_code == 200, response.text
    events = sse_data(response.text)
    deltas = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(deltas) == "The answer is 42. Observ"
    (end,) = [e["delta"] for e in events if e["type"] == "message_delta"]
    assert (end["stop_reason"], end["stop_sequence"]) == ("stop_sequence", "ation: the")


@pytest.mark.parametrize(
    ("stop", "content"),
    [
        pytest.param(["Observation:"], "The answer is 42. ", id="whole-tokens"),
        pytest.param(["ation: the", "END"], "The answer is 42. Observ", id="within-a-token"),
    ],
)
@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_chat_ends_before_the_stop_string(
    scripted: RunningProxy, stop: list[str], content: str, stream: bool
) -> None:
    _, key = await scripted.start_session()
    body = {"model": "tiny", "messages": [{"role": "user", "content": "go"}], "stop": stop}
    response = await scripted.session_post(key, "/v1/chat/completions", {**body, "stream": stream})
    assert response.status_code == 200, response.text
    if stream:
        chunks = [c["choices"][0] for c in sse_data(response.text)[:-1] if c["choices"]]
        pieces = [c["delta"]["content"] for c in chunks if c["delta"].get("content")]
        assert len(pieces) > 1  # it did stream, token by token
        assert ("".join(pieces), chunks[-1]["finish_reason"]) == (content, "stop")
    else:
        (choice,) = response.json()["choices"]
        assert (choice["message"]["content"], choice["finish_reason"]) == (content, "stop")


async def test_the_next_call_continues_the_recorded_tokens(
    scripted: RunningProxy, renderer: ChatRenderer
) -> None:
    session_id, key = await scripted.start_session()
    client = openai_client(scripted, key)
    messages: list[Any] = [{"role": "user", "content": "go"}]
    first = await client.chat.completions.create(
        model="tiny", messages=messages, stop=["Observation:"]
    )
    assert first.choices[0].message.content == "The answer is 42. "
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "user", "content": "and then?"},
    ]
    second = await client.chat.completions.create(model="tiny", messages=messages)
    assert (await scripted.session_post(key, "/rl/end_session")).status_code == 200
    export = await scripted.export(session_id)
    interactions = interactions_from_export(export)
    parent, child = interactions[first.id], interactions[second.id]
    assert (child.link, child.parent_id) == (Link.PREFIX, first.id)
    assert parent.model_response is not None
    assert child.model_response is not None
    # The parent's tokens are what the engine produced, stop string included; the child's
    # prompt continues them token for token.
    assert renderer.decode(parent.model_response.output_tokens).endswith(" Observation:")
    parent_sequence = parent.model_response.input_tokens + parent.model_response.output_tokens
    assert child.model_response.input_tokens[: len(parent_sequence)] == parent_sequence


@contextlib.asynccontextmanager
async def _embedded_proxy(tiny_model: Any, renderer: ChatRenderer) -> AsyncIterator[RunningProxy]:
    engine = TransformersEngine(tiny_model, tokenizer=renderer.tokenizer)
    chat = ChatConfig(max_context=512, default_max_tokens=32, tool_parser=None)
    config = ServeConfig(chat=chat, limits=LimitsConfig(model_name="tiny"))
    async with start_test_proxy(engine, renderer, config) as running:
        yield running


async def test_the_embedded_engine_reports_it_too(
    tiny_model: Any, renderer: ChatRenderer, http2: httpx2.AsyncClient
) -> None:
    async with _embedded_proxy(tiny_model, renderer) as proxy:
        _, key = await proxy.start_session()
        client = anthropic_client(proxy, key, http2)
        # Greedy decoding replies the same every time: a stop string from the middle of the
        # first reply ends the second one there.
        first = await _messages_reply(client, [], False, extra_body={"temperature": 0})
        assert first.content[0].type == "text"
        text = first.content[0].text
        assert len(text) > 12, text
        stop = text[6:10]
        assert stop.strip(), text
        second = await _messages_reply(client, [stop], False, extra_body={"temperature": 0})
        assert (second.stop_reason, second.stop_sequence) == ("stop_sequence", stop)
        assert second.content[0].type == "text"
        assert text.startswith(second.content[0].text)
        streamed = await _messages_reply(client, [stop], True, extra_body={"temperature": 0})
        assert (streamed.stop_reason, streamed.stop_sequence) == ("stop_sequence", stop)
