"""The conversation tree as HTTP clients build it: n > 1 siblings, parents across the three APIs,
and token fidelity of the concat export against the engine and a fresh forward pass."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import torch
from add_tool import ANTHROPIC_ADD_TOOL, CHAT_ADD_TOOL, RESPONSES_ADD_TOOL

from rltap.chat.renderer import ChatRenderer
from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
from rltap.engines.scripted import ScriptedEngine
from rltap.record.tensor_codec import decode_tensors
from rltap.record.types import ModelRequest, TokenChunk
from rltap.testing.proxy import RunningProxy, start_test_proxy
from rltap.testing.scripts import FINAL_PREFIX, tool_loop

ProxyFactory = Callable[..., Awaitable[RunningProxy]]

SYSTEM = "Be brief."


def numbered_replies() -> Callable[..., str]:
    """A script whose every reply is different: `Reply <k> at turn <turn>`."""
    counter = itertools.count()

    def script(
        messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, turn: int
    ) -> str:
        return f"Reply {next(counter)} at turn {turn}"

    return script


async def end_and_export(proxy: RunningProxy, key: str, session_id: str, **kw: Any) -> Any:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    return await proxy.export(session_id, **kw)


# --- n > 1 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_n_choices_are_siblings_and_each_can_be_continued(
    make_proxy: ProxyFactory, stream: bool
) -> None:
    proxy = await make_proxy(numbered_replies())
    session_id, key = await proxy.start_session()
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
    messages: list[Any] = [{"role": "user", "content": "start"}]
    root = await client.chat.completions.create(model="tiny", messages=messages)
    messages += [root.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "user", "content": "give me three"}]
    if stream:
        async with client.chat.completions.stream(model="tiny", messages=messages, n=3) as events:
            fork = await events.get_final_completion()
    else:
        fork = await client.chat.completions.create(model="tiny", messages=messages, n=3)
    assert sorted(choice.index for choice in fork.choices) == [0, 1, 2]
    texts = [choice.message.content for choice in sorted(fork.choices, key=lambda c: c.index)]
    assert len(set(texts)) == 3
    assert all(text and text.endswith("at turn 1") for text in texts)

    chosen = next(choice for choice in fork.choices if choice.index == 1)
    continuation = await client.chat.completions.create(
        model="tiny",
        messages=[
            *messages,
            chosen.message.model_dump(exclude_none=True),
            {"role": "user", "content": "go on"},
        ],
    )
    export = await end_and_export(proxy, key, session_id)
    by_text = {item["output_text"]: item for item in export["interactions"]}
    assert len(export["interactions"]) == 5
    siblings = [by_text[text] for text in texts]
    assert len({item["interaction_id"] for item in siblings}) == 3
    assert {item["parent_id"] for item in siblings} == {root.id}
    (last,) = [i for i in export["interactions"] if i["interaction_id"] == continuation.id]
    assert last["parent_id"] == siblings[1]["interaction_id"]


# --- cross-API parent resolution -----------------------------------------------------------


async def test_plain_turns_link_across_the_three_apis(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    openai_client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
    first = await openai_client.chat.completions.create(
        model="tiny",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "q1"}],
    )
    answer_1 = first.choices[0].message.content
    assert answer_1 == "Turn 0: you said: q1"

    second = await openai_client.responses.create(
        model="tiny",
        instructions=SYSTEM,
        input=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q1"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": answer_1, "annotations": []}],
            },
            {"role": "user", "content": "q2"},
        ],
    )
    answer_2 = second.output_text
    assert answer_2 == "Turn 1: you said: q2"

    async with httpx2.AsyncClient(timeout=120) as http:
        anthropic_client = anthropic.AsyncAnthropic(
            base_url=proxy.url, api_key=key, http_client=http
        )
        third = await anthropic_client.messages.create(
            model="tiny",
            max_tokens=256,
            system=[{"type": "text", "text": SYSTEM}],
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "q1"}]},
                {"role": "assistant", "content": [{"type": "text", "text": answer_1}]},
                {"role": "user", "content": "q2"},
                {"role": "assistant", "content": answer_2},
                {"role": "user", "content": "q3"},
            ],
        )
    assert third.content[0].type == "text"
    assert third.content[0].text == "Turn 2: you said: q3"

    export = await end_and_export(proxy, key, session_id)
    parents = {item["interaction_id"]: item["parent_id"] for item in export["interactions"]}
    assert parents == {first.id: None, second.id: first.id, third.id: second.id}


async def test_tool_turns_link_across_the_three_apis(proxy: RunningProxy) -> None:
    session_id, key = await proxy.start_session()
    openai_client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
    question = "add 2 and 2"
    first = await openai_client.chat.completions.create(
        model="tiny",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        tools=[CHAT_ADD_TOOL],
    )
    (call,) = first.choices[0].message.tool_calls or []
    arguments = json.loads(call.function.arguments)
    assert arguments == {"a": 2, "b": 2}

    second = await openai_client.responses.create(
        model="tiny",
        instructions=SYSTEM,
        tools=[RESPONSES_ADD_TOOL],
        input=[
            {"role": "user", "content": question},
            {
                "type": "function_call",
                "call_id": call.id,
                "name": "add",
                "arguments": call.function.arguments,
            },
            {"type": "function_call_output", "call_id": call.id, "output": "4"},
        ],
    )
    assert second.output_text == f"{FINAL_PREFIX} 4"

    async with httpx2.AsyncClient(timeout=120) as http:
        anthropic_client = anthropic.AsyncAnthropic(
            base_url=proxy.url, api_key=key, http_client=http
        )
        third = await anthropic_client.messages.create(
            model="tiny",
            max_tokens=256,
            system=SYSTEM,
            tools=[ANTHROPIC_ADD_TOOL],
            messages=[
                {"role": "user", "content": question},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": call.id, "name": "add", "input": arguments}
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "4"}],
                },
                {"role": "assistant", "content": [{"type": "text", "text": second.output_text}]},
                {"role": "user", "content": "thanks"},
            ],
        )
    assert third.content[0].type == "text"
    assert third.content[0].text == "Turn 2: you said: thanks"

    export = await end_and_export(proxy, key, session_id)
    parents = {item["interaction_id"]: item["parent_id"] for item in export["interactions"]}
    assert parents == {first.id: None, second.id: first.id, third.id: second.id}


# --- token fidelity ------------------------------------------------------------------------


@dataclass
class EngineCall:
    prompt: list[int]
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)


class RecordingEngine(ScriptedEngine):
    """The scripted engine, keeping the ids it consumed and the tokens it produced."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[EngineCall] = []

    async def stream(self, request: ModelRequest) -> AsyncGenerator[TokenChunk, None]:
        call = EngineCall(prompt=list(request.input_ids))
        self.calls.append(call)
        async for chunk in super().stream(request):
            call.output += chunk.token_ids
            call.logprobs += chunk.logprobs
            call.versions += chunk.versions
            yield chunk


@dataclass
class Recorded:
    proxy: RunningProxy
    engine: RecordingEngine


@pytest.fixture
async def recorded(tiny_model: Any, renderer: ChatRenderer) -> AsyncIterator[Recorded]:
    engine = RecordingEngine(tool_loop, tiny_model, tokenizer=renderer.tokenizer)
    config = ServeConfig(
        chat=ChatConfig(max_context=2048, default_max_tokens=256, reasoning_parser="qwen3"),
        limits=LimitsConfig(capacity=8, model_name="tiny"),
    )
    async with start_test_proxy(engine, renderer, config) as proxy:
        yield Recorded(proxy, engine)


def fresh_logprobs(model: Any, ids: list[int]) -> torch.Tensor:
    """log p(ids[i] | ids[:i]) for every i >= 1 (index 0 is left 0), by one forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    scores = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])
    return torch.cat([torch.zeros(1), scores[:, 0]])


async def test_concat_export_is_token_faithful(recorded: Recorded, tiny_model: Any) -> None:
    proxy, engine = recorded.proxy, recorded.engine
    session_id, key = await proxy.start_session()
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)
    opening: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "add 2 and 2"},
    ]
    first = await client.chat.completions.create(
        model="tiny", messages=opening, tools=[CHAT_ADD_TOOL]
    )
    (call,) = first.choices[0].message.tool_calls or []
    after_call = [*opening, first.choices[0].message.model_dump(exclude_none=True)]

    # Branch A (streamed): tool result 4, then one more user turn. Branch B: tool result 5.
    branch_a = [*after_call, {"role": "tool", "tool_call_id": call.id, "content": "4"}]
    async with client.chat.completions.stream(
        model="tiny", messages=branch_a, tools=[CHAT_ADD_TOOL]
    ) as events:
        second = await events.get_final_completion()
    branch_a += [
        second.choices[0].message.model_dump(exclude_none=True),
        {"role": "user", "content": "and now?"},
    ]
    third = await client.chat.completions.create(
        model="tiny", messages=branch_a, tools=[CHAT_ADD_TOOL]
    )
    branch_b = [*after_call, {"role": "tool", "tool_call_id": call.id, "content": "5"}]
    other = await client.chat.completions.create(
        model="tiny", messages=branch_b, tools=[CHAT_ADD_TOOL]
    )
    assert other.choices[0].message.content == f"{FINAL_PREFIX} 5"

    export = await end_and_export(proxy, key, session_id, style="concat")
    leaves = {item["interaction_id"]: item for item in export["interactions"]}
    assert set(leaves) == {third.id, other.id}
    c_first, c_second, c_third, c_other = engine.calls
    for leaf_id, branch in (
        (third.id, [c_first, c_second, c_third]),
        (other.id, [c_first, c_other]),
    ):
        tensors = decode_tensors(leaves[leaf_id]["tensors"])
        ids = tensors["input_ids"][0].tolist()
        leaf_call = branch[-1]
        assert ids == leaf_call.prompt + leaf_call.output
        expected_mask = [0] * len(ids)
        expected_logprobs = [0.0] * len(ids)
        expected_versions = [-1] * len(ids)
        for parent, child in itertools.pairwise(branch):
            assert child.prompt[: len(parent.prompt) + len(parent.output)] == (
                parent.prompt + parent.output
            )
        for engine_call in branch:
            start = len(engine_call.prompt)
            end = start + len(engine_call.output)
            assert ids[start:end] == engine_call.output
            expected_mask[start:end] = [1] * len(engine_call.output)
            expected_logprobs[start:end] = engine_call.logprobs
            expected_versions[start:end] = engine_call.versions
        assert tensors["loss_mask"][0].tolist() == expected_mask
        assert tensors["versions"][0].tolist() == expected_versions
        assert torch.equal(
            tensors["logprobs"][0], torch.tensor(expected_logprobs, dtype=torch.float32)
        )
        assert tensors["attention_mask"].dtype == torch.bool
        assert bool(tensors["attention_mask"].all())

        generated = tensors["loss_mask"][0].bool()
        reference = fresh_logprobs(tiny_model, ids)
        difference = (tensors["logprobs"][0] - reference)[generated].abs().max().item()
        assert difference <= 1e-5
