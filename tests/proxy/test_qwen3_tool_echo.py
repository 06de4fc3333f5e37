"""Qwen3's own chat template behind the proxy, with the qwen3 reasoning parser: a tool call whose
reply the agent echoes back (`content: null` on Chat, a `function_call` item on Responses, a
`tool_use` block on Anthropic) with the tool's result, and the second turn answers, linked to the
first and continuing its tokens.

Qwen3's template renders an earlier assistant turn without its think block unless the agent echoes
the reasoning back (and always without it before the last user query), so a full re-rendering of
turn 1 is not the tokens the model produced; in concat mode the child reuses the parent's tokens,
so the branch continues token for token all the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from add_tool import ANTHROPIC_ADD_TOOL, CHAT_ADD_TOOL, RESPONSES_ADD_TOOL

from rltap.chat.renderer import ChatRenderer
from rltap.record.tensor_codec import decode_tensors
from rltap.testing.proxy import RunningProxy
from rltap.testing.scripts import FINAL_PREFIX, tool_loop

QUESTION = "add 2 and 2"
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 2}}\n</tool_call>'
REASONING = "The user wants a sum, so I call add."


def think_then_call(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
) -> str:
    """The tool loop, with Qwen3's reasoning block before the tool call."""
    reply = tool_loop(messages, tools, turn)
    return f"<think>\n{REASONING}\n</think>\n\n{reply}" if "<tool_call>" in reply else reply


@pytest.fixture
async def qwen3_proxy(
    make_proxy: Callable[..., Awaitable[RunningProxy]],
    renderer: ChatRenderer,
    qwen3_chat_template: str,
) -> RunningProxy:
    """The proxy with Qwen3's template, the hermes tool parser and the qwen3 reasoning parser."""
    qwen3_renderer = ChatRenderer(
        renderer.tokenizer,
        mode="concat",
        chat_template=qwen3_chat_template,
        extra_stop_token_ids=renderer.stop_token_ids,
    )
    return await make_proxy(think_then_call, reasoning_parser="qwen3", chat_renderer=qwen3_renderer)


async def chat_turns(proxy: RunningProxy, key: str, stream: bool) -> tuple[str, str, str]:
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    first = await client.chat.completions.create(
        model="tiny", messages=messages, tools=[CHAT_ADD_TOOL]
    )
    reply = first.choices[0].message
    assert reply.content is None
    assert getattr(reply, "reasoning_content", None) == REASONING
    (call,) = reply.tool_calls or []
    # What the Agents SDK sends back: the reply's tool calls under an explicit `content: null`.
    echo = {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]}
    messages += [echo, {"role": "tool", "tool_call_id": call.id, "content": "5"}]
    if stream:
        async with client.chat.completions.stream(
            model="tiny", messages=messages, tools=[CHAT_ADD_TOOL]
        ) as events:
            second = await events.get_final_completion()
    else:
        second = await client.chat.completions.create(
            model="tiny", messages=messages, tools=[CHAT_ADD_TOOL]
        )
    return first.id, second.id, second.choices[0].message.content or ""


async def responses_turns(proxy: RunningProxy, key: str, stream: bool) -> tuple[str, str, str]:
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
    items: list[Any] = [{"role": "user", "content": QUESTION}]
    first = await client.responses.create(model="tiny", input=items, tools=[RESPONSES_ADD_TOOL])
    (call,) = [item for item in first.output if item.type == "function_call"]
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items += [{"type": "function_call_output", "call_id": call.call_id, "output": "5"}]
    second = await client.responses.create(
        model="tiny", input=items, tools=[RESPONSES_ADD_TOOL], stream=stream
    )
    if stream:
        async for event in second:
            if event.type == "response.completed":
                return first.id, event.response.id, event.response.output_text
        pytest.fail("the stream ended without response.completed")
    return first.id, second.id, second.output_text


async def anthropic_turns(proxy: RunningProxy, key: str, stream: bool) -> tuple[str, str, str]:
    async with httpx2.AsyncClient(timeout=120) as http:
        client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key=key, http_client=http)
        messages: list[Any] = [{"role": "user", "content": QUESTION}]
        first = await client.messages.create(
            model="tiny", max_tokens=256, messages=messages, tools=[ANTHROPIC_ADD_TOOL]
        )
        (call,) = [block for block in first.content if block.type == "tool_use"]
        assert call.input == {"a": 2, "b": 2}
        result = {"type": "tool_result", "tool_use_id": call.id, "content": "5"}
        messages += [
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [result]},
        ]
        kwargs: dict[str, Any] = {"model": "tiny", "max_tokens": 256, "tools": [ANTHROPIC_ADD_TOOL]}
        if stream:
            async with client.messages.stream(messages=messages, **kwargs) as events:
                second = await events.get_final_message()
        else:
            second = await client.messages.create(messages=messages, **kwargs)
    text = "".join(block.text for block in second.content if block.type == "text")
    return first.id, second.id, text


Turns = Callable[[RunningProxy, str, bool], Awaitable[tuple[str, str, str]]]


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
@pytest.mark.parametrize(
    "turns",
    [
        pytest.param(chat_turns, id="chat"),
        pytest.param(responses_turns, id="responses"),
        pytest.param(anthropic_turns, id="messages"),
    ],
)
async def test_echoed_tool_call_continues_with_qwen3_template(
    qwen3_proxy: RunningProxy, renderer: ChatRenderer, turns: Turns, stream: bool
) -> None:
    tokenizer = renderer.tokenizer
    proxy = qwen3_proxy
    session_id, key = await proxy.start_session()

    first_id, second_id, answer = await turns(proxy, key, stream)

    assert answer == f"{FINAL_PREFIX} 5"
    assert (await proxy.session_post(key, "/rl/end_session")).status_code == 200
    # The concat export checks token by token that the child's prompt starts with the parent's
    # whole sequence (prompt + output); one leaf means the two turns are one branch.
    (leaf,) = (await proxy.export(session_id, style="concat"))["interactions"]
    assert (leaf["interaction_id"], leaf["parent_id"]) == (second_id, first_id)
    tensors = decode_tensors(leaf["tensors"])
    ids = tensors["input_ids"][0].tolist()
    assert len(ids) == leaf["input_len"] + leaf["output_len"]
    runs = trained_runs(tensors["loss_mask"][0].tolist())
    assert len(runs) == 2
    assert runs[1] == (leaf["input_len"], len(ids))
    (first_start, first_end), _ = runs
    assert (
        tokenizer.decode(ids[first_start:first_end])
        == f"<think>\n{REASONING}\n</think>\n\n{CALL}<|im_end|>"
    )
    assert tokenizer.decode(ids[first_end : leaf["input_len"]]) == (
        "\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def trained_runs(mask: list[int]) -> list[tuple[int, int]]:
    """The [start, end) spans of ones in a loss mask."""
    runs: list[tuple[int, int]] = []
    for position, bit in enumerate(mask):
        if bit and (not runs or runs[-1][1] != position):
            runs.append((position, position + 1))
        elif bit:
            runs[-1] = (runs[-1][0], position + 1)
    return runs
