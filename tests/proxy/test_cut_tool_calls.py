"""A reply the token limit cuts inside a tool call's markup: no markup in the text, on any API.

What an OpenAI user expects of a call cut by `max_tokens`: Chat ends `finish_reason: "length"`,
Responses is `incomplete` (`max_output_tokens`), Messages ends `max_tokens`; the call the model did
not finish is neither text (an Agents SDK agent would print `<tool_call>{...` as its answer) nor
a tool call (its arguments are not JSON). Text before the call stays. The interaction is still
recorded with the engine's real tokens, markup and all. Forced calls (`required`, a named tool)
run under their grammar in the scripted engine, which checks the cut reply against it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import pytest
from add_tool import ANTHROPIC_ADD_TOOL, CHAT_ADD_TOOL, RESPONSES_ADD_TOOL
from clients import sse_data

from rltap.chat.renderer import ChatRenderer
from rltap.proxy.client import interactions_from_export
from rltap.testing.proxy import RunningProxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]

PREFACE = "Let me add them."
# Compact arguments, as a grammar makes the model write them.
CALL = '<tool_call>\n{"name": "add", "arguments": {"a":2,"b":2}}\n</tool_call>'
# Tokens of the reply with a preface: the preface and about half the call.
CUT = 14


def _call_reply(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    return f"{PREFACE} {CALL}" if "preface" in str(messages[-1]["content"]) else CALL


@pytest.fixture
async def scripted(make_proxy: ProxyFactory) -> RunningProxy:
    return await make_proxy(_call_reply, reasoning_parser=None, token_delay=0.001)


# (tool choice in each API's form, the user message, the text expected before the call)
CHOICES = [
    pytest.param(("auto", "auto", {"type": "auto"}), "preface please", PREFACE, id="auto"),
    pytest.param(("required", "required", {"type": "any"}), "add", "", id="required"),
    pytest.param(
        (
            {"type": "function", "function": {"name": "add"}},
            {"type": "function", "name": "add"},
            {"type": "tool", "name": "add"},
        ),
        "add",
        "",
        id="named",
    ),
]
STREAM = [pytest.param(False, id="json"), pytest.param(True, id="sse")]


async def _recorded_output(
    proxy: RunningProxy, renderer: ChatRenderer, key: str, session_id: str
) -> str:
    """The exported output tokens of the session's one interaction, decoded."""
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    (interaction,) = interactions_from_export(await proxy.export(session_id)).values()
    assert interaction.model_response is not None
    assert interaction.model_response.output_len == CUT
    return renderer.decode(interaction.model_response.output_tokens)


@pytest.mark.parametrize(("choice", "user", "text"), CHOICES)
@pytest.mark.parametrize("stream", STREAM)
async def test_chat(
    scripted: RunningProxy,
    renderer: ChatRenderer,
    choice: tuple[Any, ...],
    user: str,
    text: str,
    stream: bool,
) -> None:
    session_id, key = await scripted.start_session()
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": user}],
        "tools": [CHAT_ADD_TOOL],
        "tool_choice": choice[0],
        "max_tokens": CUT,
        "stream": stream,
    }
    response = await scripted.session_post(key, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    if stream:
        chunks = sse_data(response.text)
        assert chunks[-1] == "[DONE]"
        deltas = [c["choices"][0] for c in chunks[:-1] if c["choices"]]
        assert not any("tool_calls" in d["delta"] for d in deltas)
        content = "".join(d["delta"].get("content") or "" for d in deltas)
        finish = deltas[-1]["finish_reason"]
    else:
        (reply,) = response.json()["choices"]
        assert "tool_calls" not in reply["message"]
        content, finish = reply["message"]["content"], reply["finish_reason"]
    assert (content, finish) == (text, "length")
    assert "<tool_call>" in await _recorded_output(scripted, renderer, key, session_id)


@pytest.mark.parametrize(("choice", "user", "text"), CHOICES)
@pytest.mark.parametrize("stream", STREAM)
async def test_responses(
    scripted: RunningProxy,
    renderer: ChatRenderer,
    choice: tuple[Any, ...],
    user: str,
    text: str,
    stream: bool,
) -> None:
    session_id, key = await scripted.start_session()
    body: dict[str, Any] = {
        "model": "tiny",
        "input": user,
        "tools": [RESPONSES_ADD_TOOL],
        "tool_choice": choice[1],
        "max_output_tokens": CUT,
        "stream": stream,
    }
    response = await scripted.session_post(key, "/v1/responses", body)
    assert response.status_code == 200, response.text
    if stream:
        events = sse_data(response.text)
        assert [e["type"] for e in events if e["type"].endswith("_arguments.delta")] == []
        streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert streamed == text
        assert events[-1]["type"] == "response.incomplete"
        reply = events[-1]["response"]
    else:
        reply = response.json()
    assert (reply["status"], reply["incomplete_details"]) == (
        "incomplete",
        {"reason": "max_output_tokens"},
    )
    # One message item, empty when there is no text: the client's history still holds the turn.
    (item,) = reply["output"]
    assert (item["type"], item["status"]) == ("message", "incomplete")
    assert [part["text"] for part in item["content"]] == [text]
    assert "<tool_call>" in await _recorded_output(scripted, renderer, key, session_id)


@pytest.mark.parametrize(("choice", "user", "text"), CHOICES)
@pytest.mark.parametrize("stream", STREAM)
async def test_messages(
    scripted: RunningProxy,
    renderer: ChatRenderer,
    choice: tuple[Any, ...],
    user: str,
    text: str,
    stream: bool,
) -> None:
    session_id, key = await scripted.start_session()
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": user}],
        "tools": [ANTHROPIC_ADD_TOOL],
        "tool_choice": choice[2],
        "max_tokens": CUT,
        "stream": stream,
    }
    response = await scripted.session_post(key, "/v1/messages", body)
    assert response.status_code == 200, response.text
    if stream:
        events = sse_data(response.text)
        starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
        assert starts == (["text"] if text else [])
        deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
        assert "".join(d["text"] for d in deltas) == text
        (end,) = [e["delta"] for e in events if e["type"] == "message_delta"]
        stop_reason = end["stop_reason"]
    else:
        message = response.json()
        assert message["content"] == ([{"type": "text", "text": text}] if text else [])
        stop_reason = message["stop_reason"]
    assert stop_reason == "max_tokens"
    assert "<tool_call>" in await _recorded_output(scripted, renderer, key, session_id)
