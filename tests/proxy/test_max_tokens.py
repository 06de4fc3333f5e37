"""`max_tokens` beyond the context left: cut to what is left, through the real clients.

ChatAnthropic sends `max_tokens=64000` for its default model whatever the server's context; an
agent must still get its reply, ending `length` / `max_tokens` / incomplete if it runs into the
limit. `--strict-max-tokens` keeps the 400 (tests/proxy/test_errors.py); a prompt that does not
fit is a 400 either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from clients import anthropic_client, openai_client

from rltap.testing.proxy import RunningProxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]

MAX_CONTEXT = 160
HUGE = 64000


def _long_reply(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    content = str(messages[-1].get("content"))
    return "short" if "short" in content else "word " * 400


@pytest.fixture
async def small_proxy(make_proxy: ProxyFactory) -> RunningProxy:
    return await make_proxy(_long_reply, max_context=MAX_CONTEXT)


async def _recorded_lengths(proxy: RunningProxy, key: str, session_id: str) -> list[int]:
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    export = await proxy.export(session_id)
    return [item["input_len"] + item["output_len"] for item in export["interactions"]]


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
async def test_chat_cuts_max_tokens_to_the_context_left(
    small_proxy: RunningProxy, field: str
) -> None:
    session_id, key = await small_proxy.start_session()
    client = openai_client(small_proxy, key)
    short = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "short"}], **{field: HUGE}
    )
    assert short.choices[0].finish_reason == "stop"
    assert short.choices[0].message.content == "short"
    long = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "long"}], **{field: HUGE}
    )
    assert long.choices[0].finish_reason == "length"
    assert long.usage is not None
    assert long.usage.prompt_tokens + long.usage.completion_tokens == MAX_CONTEXT
    lengths = await _recorded_lengths(small_proxy, key, session_id)
    assert lengths[1] == MAX_CONTEXT


async def test_chat_stream_cut_ends_length(small_proxy: RunningProxy) -> None:
    _, key = await small_proxy.start_session()
    stream = await openai_client(small_proxy, key).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "long"}], max_tokens=HUGE, stream=True
    )
    reasons = [c.choices[0].finish_reason async for c in stream if c.choices]
    assert reasons[-1] == "length"


async def test_responses_cut_is_incomplete_max_output_tokens(small_proxy: RunningProxy) -> None:
    _, key = await small_proxy.start_session()
    client = openai_client(small_proxy, key)
    short = await client.responses.create(model="tiny", input="short", max_output_tokens=HUGE)
    assert short.status == "completed"
    assert short.output_text == "short"
    long = await client.responses.create(model="tiny", input="long", max_output_tokens=HUGE)
    assert long.status == "incomplete"
    assert long.incomplete_details is not None
    assert long.incomplete_details.reason == "max_output_tokens"
    assert long.usage is not None
    assert long.usage.input_tokens + long.usage.output_tokens == MAX_CONTEXT


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_messages_cut_ends_max_tokens(
    small_proxy: RunningProxy, http2: httpx2.AsyncClient, stream: bool
) -> None:
    _, key = await small_proxy.start_session()
    client = anthropic_client(small_proxy, key, http2)
    request: dict[str, Any] = {"model": "tiny", "max_tokens": HUGE}
    short = await client.messages.create(messages=[{"role": "user", "content": "short"}], **request)
    assert short.stop_reason == "end_turn"
    long_messages: Any = [{"role": "user", "content": "long"}]
    if stream:
        async with client.messages.stream(messages=long_messages, **request) as events:
            long = await events.get_final_message()
    else:
        long = await client.messages.create(messages=long_messages, **request)
    assert long.stop_reason == "max_tokens"
    assert long.usage.input_tokens + long.usage.output_tokens == MAX_CONTEXT


async def test_a_prompt_that_does_not_fit_is_still_400(
    small_proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    _, key = await small_proxy.start_session()
    long_prompt = "go " * 400
    with pytest.raises(openai.BadRequestError) as chat_error:
        await openai_client(small_proxy, key).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": long_prompt}], max_tokens=HUGE
        )
    assert chat_error.value.code == "context_length_exceeded"
    with pytest.raises(anthropic.BadRequestError) as messages_error:
        await anthropic_client(small_proxy, key, http2).messages.create(
            model="tiny", max_tokens=HUGE, messages=[{"role": "user", "content": long_prompt}]
        )
    assert str(MAX_CONTEXT) in messages_error.value.message


async def test_strict_max_tokens_refuses(make_proxy: ProxyFactory) -> None:
    proxy = await make_proxy(
        _long_reply, max_context=MAX_CONTEXT, chat_options={"strict_max_tokens": True}
    )
    _, key = await proxy.start_session()
    with pytest.raises(openai.BadRequestError) as error:
        await openai_client(proxy, key).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "short"}], max_tokens=HUGE
        )
    assert error.value.code == "context_length_exceeded"
    assert f"maximum context length is {MAX_CONTEXT}" in error.value.message
