"""The text an agent is shown is the decoded reply less only the markup the parsers turn into
fields, on every API, streamed or not.

A plain reply keeps its whitespace as decoded (`"line one\\n"` comes back as `"line one\\n"`, as
vLLM returns it); the `<think>` block and the tool-call blocks go to their own fields together with
the whitespace touching them, which the chat template writes itself (`\\n</think>\\n\\n` + content,
content + `\\n<tool_call>`). The concatenated deltas of a stream are the non-streamed text.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import pytest
import torch
from clients import sse_data

from rltap.chat.renderer import ChatRenderer
from rltap.client.proxy import interactions_from_export
from rltap.testing.proxy import RunningProxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]

CALL = '<tool_call>\n{"name": "get", "arguments": {"city": "Paris"}}\n</tool_call>'
ARGUMENTS = '{"city":"Paris"}'
# The user's message -> the scripted reply.
REPLIES = {
    "trailing": "line one\n",
    "leading": "   indented\n\n",
    "reasoning": "<think>\nweigh it\n</think>\n\n  Answer:\n42\n",
    "tool": f"<think>\nlook it up\n</think>\n\nLet me check.\n{CALL}",
}
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = {
    "/v1/chat/completions": [
        {"type": "function", "function": {"name": "get", "parameters": PARAMETERS}}
    ],
    "/v1/responses": [{"type": "function", "name": "get", "parameters": PARAMETERS}],
    "/v1/messages": [{"name": "get", "input_schema": PARAMETERS}],
}


def _by_message(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    return REPLIES[str(messages[-1]["content"])]


def _body(path: str, prompt: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tiny", "stream": stream, "tools": TOOLS[path]}
    if path == "/v1/responses":
        return body | {"input": prompt}
    body["messages"] = [{"role": "user", "content": prompt}]
    if path == "/v1/messages":
        body["max_tokens"] = 256
    return body


def _shown(path: str, body: Any) -> tuple[str, str, list[tuple[str, str]]]:
    """(content, reasoning, calls) of a whole response body."""
    if path == "/v1/chat/completions":
        message = body["choices"][0]["message"]
        calls = [
            (c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls") or []
        ]
        return message["content"] or "", message.get("reasoning_content") or "", calls
    if path == "/v1/responses":
        items = body["output"]
        text = "".join(p["text"] for i in items if i["type"] == "message" for p in i["content"])
        reasoning = "".join(
            p["text"] for i in items if i["type"] == "reasoning" for p in i["content"]
        )
        calls = [(i["name"], i["arguments"]) for i in items if i["type"] == "function_call"]
        return text, reasoning, calls
    blocks = body["content"]
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    reasoning = "".join(b["thinking"] for b in blocks if b["type"] == "thinking")
    calls = [
        (b["name"], json.dumps(b["input"], separators=(",", ":")))
        for b in blocks
        if b["type"] == "tool_use"
    ]
    return text, reasoning, calls


def _streamed_text(path: str, events: list[Any]) -> tuple[str, str]:
    """(content, reasoning) as the concatenated deltas of a stream."""
    content: list[str] = []
    reasoning: list[str] = []
    for event in events:
        if event == "[DONE]":
            continue
        if path == "/v1/chat/completions":
            for choice in event["choices"]:
                content.append(choice["delta"].get("content") or "")
                reasoning.append(choice["delta"].get("reasoning_content") or "")
        elif path == "/v1/responses":
            if event["type"] == "response.output_text.delta":
                content.append(event["delta"])
            elif event["type"] == "response.reasoning_text.delta":
                reasoning.append(event["delta"])
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                content.append(delta["text"])
            elif delta["type"] == "thinking_delta":
                reasoning.append(delta["thinking"])
    return "".join(content), "".join(reasoning)


def _final_body(path: str, events: list[Any]) -> Any:
    """The whole response a stream ends with (Responses' `response.completed`), else None."""
    if path != "/v1/responses":
        return None
    (completed,) = [e for e in events if e != "[DONE]" and e["type"] == "response.completed"]
    return completed["response"]


ROUTES = [
    pytest.param("/v1/chat/completions", id="chat"),
    pytest.param("/v1/responses", id="responses"),
    pytest.param("/v1/messages", id="messages"),
]


@pytest.mark.parametrize(
    ("prompt", "content", "reasoning", "calls"),
    [
        pytest.param("trailing", "line one\n", "", [], id="trailing-newline-kept"),
        pytest.param("leading", "   indented\n\n", "", [], id="leading-spaces-kept"),
        pytest.param("reasoning", "Answer:\n42\n", "weigh it", [], id="reasoning-then-content"),
        pytest.param(
            "tool", "Let me check.", "look it up", [("get", ARGUMENTS)], id="content-then-call"
        ),
    ],
)
@pytest.mark.parametrize("path", ROUTES)
async def test_streamed_and_whole_replies_show_the_same_exact_text(
    make_proxy: ProxyFactory,
    path: str,
    prompt: str,
    content: str,
    reasoning: str,
    calls: list[tuple[str, str]],
) -> None:
    proxy = await make_proxy(_by_message)
    _, key = await proxy.start_session()
    whole = await proxy.session_post(key, path, _body(path, prompt, stream=False))
    assert whole.status_code == 200, whole.text
    assert _shown(path, whole.json()) == (content, reasoning, calls)
    streamed = await proxy.session_post(key, path, _body(path, prompt, stream=True))
    assert streamed.status_code == 200, streamed.text
    events = sse_data(streamed.text)
    assert _streamed_text(path, events) == (content, reasoning)
    final = _final_body(path, events)
    if final is not None:
        assert _shown(path, final) == (content, reasoning, calls)


REPLY = "The quick brown fox jumps over the lazy dog, twice."


def _fixed(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    return REPLY


async def test_a_scripted_reply_streams_one_delta_per_token(
    make_proxy: ProxyFactory, renderer: ChatRenderer, tiny_model: Any
) -> None:
    proxy = await make_proxy(_fixed)
    session_id, key = await proxy.start_session()
    body = {"model": "tiny", "messages": [{"role": "user", "content": "go"}], "stream": True}
    response = await proxy.session_post(key, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    deltas = [c["choices"][0]["delta"] for c in sse_data(response.text)[:-1] if c["choices"]]
    pieces = [delta["content"] for delta in deltas if delta.get("content")]
    tokens = renderer.tokenizer.encode(REPLY, add_special_tokens=False)
    assert pieces == [renderer.decode([token]) for token in tokens]
    assert "".join(pieces) == REPLY
    # Recorded: the reply's tokens and the end-of-turn token, each scored by teacher forcing.
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    (interaction,) = interactions_from_export(await proxy.export(session_id)).values()
    recorded = interaction.model_response
    assert recorded is not None
    assert recorded.output_tokens[:-1] == tokens
    assert renderer.decode(recorded.output_tokens[-1:]) == "<|im_end|>"
    assert recorded.output_versions == [0] * len(recorded.output_tokens)
    sequence = torch.tensor([recorded.input_tokens + recorded.output_tokens])
    with torch.no_grad():
        logits = tiny_model(input_ids=sequence).logits[0]
    fresh = torch.log_softmax(logits[len(recorded.input_tokens) - 1 : -1], dim=-1)
    fresh = fresh.gather(1, torch.tensor(recorded.output_tokens)[:, None]).squeeze(1)
    assert (fresh - torch.tensor(recorded.output_logprobs)).abs().max() <= 1e-5
