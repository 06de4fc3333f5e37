"""Structured outputs and enforced tool choices end to end: a real server in front of the embedded
engine on the tiny random model, driven by the official openai and anthropic clients. Constrained
decoding makes even this model's replies schema-valid and its forced tool calls real calls."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anthropic
import httpx2
import openai
import pytest
from clients import anthropic_client, openai_client
from pydantic import BaseModel

from rltap.chat.renderer import ChatRenderer
from rltap.engines.transformers import TransformersEngine
from rltap.testing.proxy import RunningProxy

pytestmark = pytest.mark.slow

ProxyFactory = Callable[..., Awaitable[RunningProxy]]

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        # Bounded, so that even a random model finishes the value within max_tokens.
        "city": {"type": "string", "maxLength": 6},
        "days": {"type": "integer", "minimum": 0, "maximum": 9},
        "sunny": {"type": "boolean"},
    },
    "required": ["city", "days", "sunny"],
    "additionalProperties": False,
}
SMALL_INT = {"type": "integer", "minimum": 0, "maximum": 99}
ADD = {
    "name": "add",
    "description": "Add two integers.",
    "parameters": {
        "type": "object",
        "properties": {"a": SMALL_INT, "b": SMALL_INT},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
}
LOOKUP = {
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string", "maxLength": 5}},
        "required": ["query"],
        "additionalProperties": False,
    },
}
CHAT_TOOLS: list[Any] = [{"type": "function", "function": tool} for tool in (ADD, LOOKUP)]
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]


def _check_weather(value: Any) -> None:
    assert isinstance(value, dict)
    assert set(value) == {"city", "days", "sunny"}
    assert isinstance(value["city"], str)
    assert len(value["city"]) <= 6
    assert type(value["days"]) is int
    assert 0 <= value["days"] <= 9
    assert type(value["sunny"]) is bool


def _check_call(name: str, arguments: Any) -> None:
    if name == "add":
        assert set(arguments) == {"a", "b"}
        assert all(type(v) is int and 0 <= v <= 99 for v in arguments.values())
    else:
        assert name == "lookup"
        assert set(arguments) == {"query"}
        assert isinstance(arguments["query"], str)


@pytest.fixture
async def embedded(
    make_proxy: ProxyFactory, tiny_model: Any, renderer: ChatRenderer
) -> tuple[RunningProxy, str, str]:
    """A proxy on the embedded engine (hermes tool calls), and one session's id and key."""
    proxy = await make_proxy(
        engine=TransformersEngine(tiny_model, tokenizer=renderer.tokenizer),
        reasoning_parser=None,
        chat_options={"default_max_tokens": 64},
    )
    session_id, key = await proxy.start_session()
    return proxy, session_id, key


async def _export(proxy: RunningProxy, key: str, session_id: str) -> list[dict[str, Any]]:
    response = await proxy.session_post(key, "/rl/end_session")
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = (await proxy.export(session_id))["interactions"]
    return items


@pytest.mark.parametrize("stream", [pytest.param(False, id="json"), pytest.param(True, id="sse")])
async def test_chat_json_schema_reply_is_valid_json_of_the_schema(
    embedded: tuple[RunningProxy, str, str], stream: bool
) -> None:
    proxy, session_id, key = embedded
    client = openai_client(proxy, key)
    response_format: Any = {
        "type": "json_schema",
        "json_schema": {"name": "Weather", "schema": WEATHER_SCHEMA, "strict": True},
    }
    contents = []
    for seed in range(3):
        if stream:
            chunks = await client.chat.completions.create(
                model="tiny",
                messages=MESSAGES,
                response_format=response_format,
                seed=seed,
                stream=True,
            )
            contents.append("".join([c.choices[0].delta.content or "" async for c in chunks]))
        else:
            completion = await client.chat.completions.create(
                model="tiny", messages=MESSAGES, response_format=response_format, seed=seed
            )
            assert completion.choices[0].finish_reason == "stop"
            contents.append(completion.choices[0].message.content or "")
    for content in contents:
        _check_weather(json.loads(content))
        assert not re.search(r"\s", _STRING.sub("", content))  # compact: no space outside strings
    free = await client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4)
    assert free.choices[0].message.content is not None
    items = await _export(proxy, key, session_id)
    assert [item["constrained"] for item in items] == [True, True, True, False]


async def test_chat_json_object_reply_is_an_object(
    embedded: tuple[RunningProxy, str, str],
) -> None:
    proxy, _, key = embedded
    completion = await openai_client(proxy, key).chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        response_format={"type": "json_object"},
        max_tokens=512,
        seed=0,
    )
    choice = completion.choices[0]
    if choice.finish_reason == "stop":  # a random object may be long; a finished one is JSON
        assert isinstance(json.loads(choice.message.content or ""), dict)
    else:
        assert (choice.message.content or "").startswith("{")


async def test_responses_text_format_reply_is_valid_json_of_the_schema(
    embedded: tuple[RunningProxy, str, str],
) -> None:
    proxy, _, key = embedded
    client = openai_client(proxy, key)
    for seed in range(2):
        response = await client.responses.create(
            model="tiny",
            input="What is the weather in Paris?",
            text={
                "format": {
                    "type": "json_schema",
                    "name": "Weather",
                    "schema": WEATHER_SCHEMA,
                    "strict": True,
                }
            },
            extra_body={"seed": seed},
        )
        assert response.status == "completed"
        _check_weather(json.loads(response.output_text))


async def test_required_makes_the_model_call_a_tool(
    embedded: tuple[RunningProxy, str, str],
) -> None:
    proxy, _, key = embedded
    client = openai_client(proxy, key)
    for seed in range(3):
        completion = await client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            tools=CHAT_TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,
            seed=seed,
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls or []
        assert call.type == "function"
        _check_call(call.function.name, json.loads(call.function.arguments))


async def test_a_named_tool_is_the_one_called(embedded: tuple[RunningProxy, str, str]) -> None:
    proxy, _, key = embedded
    completion = await openai_client(proxy, key).chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        tools=CHAT_TOOLS,
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        parallel_tool_calls=False,
        seed=1,
    )
    (call,) = completion.choices[0].message.tool_calls or []
    assert call.function.name == "lookup"
    _check_call("lookup", json.loads(call.function.arguments))


async def test_none_gives_no_call_and_parallel_false_at_most_one(
    embedded: tuple[RunningProxy, str, str],
) -> None:
    proxy, _, key = embedded
    client = openai_client(proxy, key)
    for seed in range(3):
        none = await client.chat.completions.create(
            model="tiny", messages=MESSAGES, tools=CHAT_TOOLS, tool_choice="none", seed=seed
        )
        assert not none.choices[0].message.tool_calls
        assert none.choices[0].finish_reason != "tool_calls"
        assert "<tool_call>" not in (none.choices[0].message.content or "")
        single = await client.chat.completions.create(
            model="tiny", messages=MESSAGES, tools=CHAT_TOOLS, parallel_tool_calls=False, seed=seed
        )
        calls = single.choices[0].message.tool_calls or []
        assert len(calls) <= 1
        for call in calls:
            _check_call(call.function.name, json.loads(call.function.arguments))


async def test_anthropic_tool_choice_tool_forces_that_tool(
    embedded: tuple[RunningProxy, str, str], http2: httpx2.AsyncClient
) -> None:
    proxy, _, key = embedded
    tools: Any = [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in (ADD, LOOKUP)
    ]
    message = await anthropic_client(proxy, key, http2).messages.create(
        model="tiny",
        max_tokens=64,
        messages=MESSAGES,
        tools=tools,
        tool_choice={"type": "tool", "name": "add", "disable_parallel_tool_use": True},
    )
    assert message.stop_reason == "tool_use"
    (block,) = [b for b in message.content if b.type == "tool_use"]
    assert block.name == "add"
    _check_call("add", block.input)


class Verdict(BaseModel):
    ok: bool
    level: Literal["low", "high"]


async def test_anthropic_messages_parse_gives_the_schema_model(
    embedded: tuple[RunningProxy, str, str], http2: httpx2.AsyncClient
) -> None:
    proxy, _, key = embedded
    parsed = await anthropic_client(proxy, key, http2).messages.parse(
        model="tiny", max_tokens=64, messages=MESSAGES, output_format=Verdict
    )
    assert isinstance(parsed.parsed_output, Verdict)


async def test_a_schema_that_does_not_compile_is_a_400_on_each_api(
    proxy: RunningProxy, http2: httpx2.AsyncClient
) -> None:
    _, key = await proxy.start_session()
    client = openai_client(proxy, key)
    bad: dict[str, Any] = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    with pytest.raises(openai.BadRequestError) as chat_error:
        await client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}},
        )
    assert chat_error.value.param == "response_format.json_schema.schema"
    assert "does not exist" in chat_error.value.message
    with pytest.raises(openai.BadRequestError) as responses_error:
        await client.responses.create(
            model="tiny",
            input="hi",
            tools=[{"type": "function", "name": "f", "parameters": bad, "strict": False}],
            tool_choice="required",
        )
    assert responses_error.value.param == "tools[0].parameters"
    with pytest.raises(anthropic.BadRequestError) as messages_error:
        await anthropic_client(proxy, key, http2).messages.create(
            model="tiny",
            max_tokens=16,
            messages=MESSAGES,
            output_config={"format": {"type": "json_schema", "schema": bad}},
        )
    assert "output_config.format.schema" in messages_error.value.message
