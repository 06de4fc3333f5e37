"""What OpenAI's Responses API does and agents rely on, through a real server and the openai
client: instructions are a request's own, the reply echoes the request's settings, reasoning
summaries, and the reasoning effort switching thinking on Chat Completions too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import openai
import pytest

from rltap.testing.proxy import RunningProxy

ProxyFactory = Callable[..., Awaitable[RunningProxy]]


def client_for(proxy: RunningProxy, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, http_client=proxy.http)


async def export_of(proxy: RunningProxy, key: str, session_id: str) -> dict[str, Any]:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    return await proxy.export(session_id)


def system_messages(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    return [m["content"] for m in messages if m["role"] == "system"]


@pytest.mark.parametrize(
    "instructions",
    [
        pytest.param(["Be brief."] * 3, id="same-each-turn"),
        pytest.param(["Be brief.", "Be kind.", "Be done."], id="changed-each-turn"),
    ],
)
async def test_previous_response_id_does_not_carry_old_instructions(
    proxy: RunningProxy, instructions: list[str]
) -> None:
    session_id, key = await proxy.start_session()
    client = client_for(proxy, key)
    responses = []
    previous = None
    for turn, text in enumerate(instructions):
        response = await client.responses.create(
            model="tiny",
            instructions=text,
            input=f"question {turn}",
            **({"previous_response_id": previous} if previous else {}),
        )
        assert response.instructions == text
        responses.append(response)
        previous = response.id

    export = await export_of(proxy, key, session_id)
    recorded = {item["interaction_id"]: item for item in export["interactions"]}
    for response, text in zip(responses, instructions, strict=True):
        messages = recorded[response.id]["messages"]
        assert system_messages(messages) == [text]
        assert messages[0] == {"role": "system", "content": text}
    last = recorded[responses[-1].id]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"] == [
        "question 0",
        "question 1",
        "question 2",
    ]
    parents = [recorded[r.id]["parent_id"] for r in responses]
    assert parents == [None, responses[0].id, responses[1].id]
    links = [recorded[r.id]["link"] for r in responses]
    if len(set(instructions)) == 1:
        # The same instructions: each prompt continues the one before, token for token.
        assert links == ["root", "prefix", "prefix"]
    else:
        # New instructions open the prompt: another agent's, not a continuation of the tokens.
        assert links == ["root", "handoff", "handoff"]


async def test_the_response_echoes_the_requests_settings(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    response = await client_for(proxy, key).responses.create(
        model="tiny",
        instructions="Be brief.",
        input="hello",
        reasoning={"effort": "low", "summary": "auto"},
        text={"format": {"type": "text"}, "verbosity": "low"},
        max_output_tokens=32,
        temperature=0.7,
        top_p=0.9,
        parallel_tool_calls=False,
        tool_choice="none",
        metadata={"run": "7"},
    )
    assert response.instructions == "Be brief."
    assert response.reasoning is not None
    assert (response.reasoning.effort, response.reasoning.summary) == ("low", "auto")
    assert response.text is not None
    assert response.text.model_dump(exclude_none=True) == {
        "format": {"type": "text"},
        "verbosity": "low",
    }
    assert (response.max_output_tokens, response.temperature, response.top_p) == (32, 0.7, 0.9)
    assert (response.parallel_tool_calls, response.tool_choice) == (False, "none")
    assert response.metadata == {"run": "7"}


def thinking(messages: Sequence[Mapping[str, Any]], tools: Any, turn: int) -> str:
    return "<think>The user greets me.</think>Hello!"


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
@pytest.mark.parametrize(
    ("reasoning", "summary"),
    [
        pytest.param({"effort": "high"}, [], id="no-summary-asked"),
        pytest.param({"summary": "auto"}, ["The user greets me."], id="summary-auto"),
        pytest.param({"summary": "concise"}, ["The user greets me."], id="summary-concise"),
    ],
)
async def test_reasoning_items_carry_a_summary_when_asked(
    make_proxy: ProxyFactory, stream: bool, reasoning: dict[str, Any], summary: list[str]
) -> None:
    proxy = await make_proxy(thinking)
    _, key = await proxy.start_session()
    client = client_for(proxy, key)
    if stream:
        async with client.responses.stream(model="tiny", input="hi", reasoning=reasoning) as events:
            seen = [event async for event in events]
            response = await events.get_final_response()
        deltas = [e.delta for e in seen if e.type == "response.reasoning_summary_text.delta"]
        assert "".join(deltas) == "".join(summary)
        parts = [e for e in seen if e.type == "response.reasoning_summary_part.done"]
        assert [p.part.text for p in parts] == summary
    else:
        response = await client.responses.create(model="tiny", input="hi", reasoning=reasoning)
    (item,) = [item for item in response.output if item.type == "reasoning"]
    assert [part.text for part in item.summary] == summary
    assert [part.text for part in item.content or []] == ["The user greets me."]
    assert response.output_text == "Hello!"


@pytest.mark.parametrize("effort", ["none", "low", "high"])
async def test_chat_reasoning_effort_switches_thinking_as_responses_does(
    proxy: RunningProxy, effort: str
) -> None:
    """The same effort renders the same prompt through both APIs; "none" another one."""
    _, key = await proxy.start_session()
    client = client_for(proxy, key)
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    chat = await client.chat.completions.create(
        model="tiny",
        messages=messages,
        reasoning_effort=effort,
    )
    plain = await client.chat.completions.create(model="tiny", messages=messages)
    responses = await client.responses.create(
        model="tiny",
        input="hi",
        reasoning={"effort": effort},
    )
    assert chat.usage is not None
    assert plain.usage is not None
    assert responses.usage is not None
    assert chat.usage.prompt_tokens == responses.usage.input_tokens
    # The tiny model's Qwen3-style template closes an empty think block when thinking is off.
    if effort == "none":
        assert chat.usage.prompt_tokens > plain.usage.prompt_tokens
    else:
        assert chat.usage.prompt_tokens == plain.usage.prompt_tokens


async def test_an_unknown_reasoning_effort_is_a_400(proxy: RunningProxy) -> None:
    _, key = await proxy.start_session()
    with pytest.raises(openai.BadRequestError) as caught:
        await client_for(proxy, key).chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            reasoning_effort="enormous",
        )
    assert caught.value.param == "reasoning_effort"
