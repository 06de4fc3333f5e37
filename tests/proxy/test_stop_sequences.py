"""Stop strings end a reply on every API and engine, and the APIs say which one did.

Anthropic reports `stop_reason: "stop_sequence"` with the matched `stop_sequence` (Messages never
asks for logprobs, which the match once depended on); Chat ends with `stop` (Responses has no stop
strings). Checked with the scripted engine (a fixed reply) and with the embedded engine running
the tiny model, streamed and not.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import anthropic
import httpx2
import pytest
from clients import anthropic_client, openai_client

from rltap.chat.renderer import ChatRenderer
from rltap.chat.streaming import build_output_parser
from rltap.engines.transformers import TransformersEngine
from rltap.proxy.state import ProxyConfig
from rltap.session import SessionConfig
from rltap.testing.proxy import TEST_ADMIN_KEY, RunningProxy, start_test_proxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]
REPLY = "The answer is 42. Observation: the tool said so. END of reply"


def _fixed_reply(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    return REPLY


@pytest.fixture
async def scripted(make_proxy: ProxyFactory) -> RunningProxy:
    return await make_proxy(_fixed_reply)


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
    text = message.content[0]
    assert text.type == "text"
    assert text.text.startswith("The answer is 42.")
    assert "the tool said" not in text.text
    # A stop string the reply never reaches: the turn ends as usual.
    plain = await _messages_reply(client, ["NEVER"], stream)
    assert (plain.stop_reason, plain.stop_sequence) == ("end_turn", None)


async def test_chat_ends_stop_at_a_stop_string(scripted: RunningProxy) -> None:
    _, key = await scripted.start_session()
    client = openai_client(scripted, key)
    completion = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "go"}], stop=["Observation:"]
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.content is not None
    assert "the tool said" not in choice.message.content


@contextlib.asynccontextmanager
async def _embedded_proxy(tiny_model: Any, renderer: ChatRenderer) -> AsyncIterator[RunningProxy]:
    engine = TransformersEngine(tiny_model, tokenizer=renderer.tokenizer)
    session = SessionConfig(
        max_context=512, default_max_tokens=32, output_parser=build_output_parser(None, None)
    )
    config = ProxyConfig(admin_key=TEST_ADMIN_KEY, model_name="tiny", session=session)
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
