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
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from add_tool import ANTHROPIC_ADD_TOOL, CHAT_ADD_TOOL, RESPONSES_ADD_TOOL
from clients import sse_data

from rltap.chat.renderer import ChatRenderer
from rltap.client.proxy import interactions_from_export
from rltap.testing.proxy import RunningProxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]

PREFACE = "Let me add them."
# Compact arguments, as a grammar makes the model write them.
CALL = '<tool_call>\n{"name": "add", "arguments": {"a":2,"b":2}}\n</tool_call>'
# Fourteen tokens end inside the call's markup, with the preface or without it.
CUT = 14


def _call_reply(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    return f"{PREFACE} {CALL}" if "preface" in str(messages[-1]["content"]) else CALL


@dataclass(frozen=True)
class Case:
    """A tool choice in each API's form, the user message, and the text expected before the call."""

    chat: Any
    responses: Any
    messages: Any
    user: str = "add"
    text: str = ""


CASES = [
    pytest.param(Case("auto", "auto", {"type": "auto"}, "preface please", PREFACE), id="auto"),
    pytest.param(Case("required", "required", {"type": "any"}), id="required"),
    pytest.param(
        Case(
            {"type": "function", "function": {"name": "add"}},
            {"type": "function", "name": "add"},
            {"type": "tool", "name": "add"},
        ),
        id="named",
    ),
]
STREAM = [pytest.param(False, id="json"), pytest.param(True, id="sse")]
Post = Callable[[str, dict[str, Any]], Awaitable[httpx.Response]]


@pytest.fixture
async def post(make_proxy: ProxyFactory, renderer: ChatRenderer) -> Post:
    """POST a body to a route in a fresh session of a proxy whose replies are the call, one token
    a chunk; the reply is checked recorded with the engine's tokens, cut markup and all."""
    proxy = await make_proxy(_call_reply, reasoning_parser=None, token_delay=0.001)

    async def send(path: str, body: dict[str, Any]) -> httpx.Response:
        session_id, key = await proxy.start_session()
        response = await proxy.session_post(key, path, {"model": "tiny", **body})
        assert response.status_code == 200, response.text
        assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
        (interaction,) = interactions_from_export(await proxy.export(session_id)).values()
        assert interaction.model_response is not None
        assert interaction.model_response.output_len == CUT
        assert "<tool_call>" in renderer.decode(interaction.model_response.output_tokens)
        return response

    return send


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stream", STREAM)
async def test_chat(post: Post, case: Case, stream: bool) -> None:
    response = await post(
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": case.user}],
            "tools": [CHAT_ADD_TOOL],
            "tool_choice": case.chat,
            "max_tokens": CUT,
            "stream": stream,
        },
    )
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
    assert (content, finish) == (case.text, "length")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stream", STREAM)
async def test_responses(post: Post, case: Case, stream: bool) -> None:
    response = await post(
        "/v1/responses",
        {
            "input": case.user,
            "tools": [RESPONSES_ADD_TOOL],
            "tool_choice": case.responses,
            "max_output_tokens": CUT,
            "stream": stream,
        },
    )
    if stream:
        events = sse_data(response.text)
        assert [e["type"] for e in events if e["type"].endswith("_arguments.delta")] == []
        streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert streamed == case.text
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
    assert [part["text"] for part in item["content"]] == [case.text]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stream", STREAM)
async def test_messages(post: Post, case: Case, stream: bool) -> None:
    response = await post(
        "/v1/messages",
        {
            "messages": [{"role": "user", "content": case.user}],
            "tools": [ANTHROPIC_ADD_TOOL],
            "tool_choice": case.messages,
            "max_tokens": CUT,
            "stream": stream,
        },
    )
    if stream:
        events = sse_data(response.text)
        starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
        assert starts == (["text"] if case.text else [])
        deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
        assert "".join(d["text"] for d in deltas) == case.text
        (end,) = [e["delta"] for e in events if e["type"] == "message_delta"]
        stop_reason = end["stop_reason"]
    else:
        message = response.json()
        assert message["content"] == ([{"type": "text", "text": case.text}] if case.text else [])
        stop_reason = message["stop_reason"]
    assert stop_reason == "max_tokens"
