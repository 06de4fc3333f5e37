"""Anthropic `tool_choice` and structured outputs (`output_config.format`, the beta's
`output_format`) to the canonical request, with the bodies the real anthropic SDK sends."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from pydantic import BaseModel

from rltap.protocols.anthropic_messages import parse_request
from rltap.record.errors import InvalidRequest

from .support import WEATHER_TOOL, body

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class Weather(BaseModel):
    city: str


def _capturing_client(sent: list[dict[str, Any]]) -> anthropic.AsyncAnthropic:
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": '{"city":"Paris"}'}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }

    async def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(orjson.loads(request.content))
        return httpx2.Response(200, json=reply)

    http_client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return anthropic.AsyncAnthropic(base_url="http://t", api_key="k", http_client=http_client)


async def test_messages_parse_sends_a_format_that_becomes_the_canonical_schema() -> None:
    sent: list[dict[str, Any]] = []
    client = _capturing_client(sent)
    messages: Any = [{"role": "user", "content": "Weather?"}]
    parsed = await client.messages.parse(
        model="m", max_tokens=64, messages=messages, output_format=Weather
    )
    await client.beta.messages.parse(
        model="m", max_tokens=64, messages=messages, output_format=Weather
    )
    assert parsed.parsed_output == Weather(city="Paris")
    for wire in sent:
        response_format = parse_request(wire).response_format
        assert response_format is not None
        assert response_format["type"] == "json_schema"
        assert response_format["strict"] is True
        assert response_format["schema"]["required"] == ["city"]


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param(
            {"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}}, id="config"
        ),
        pytest.param({"output_format": {"type": "json_schema", "schema": SCHEMA}}, id="beta-field"),
    ],
)
def test_output_format_is_canonical(fields: dict[str, Any]) -> None:
    expected = {"type": "json_schema", "name": "output", "schema": SCHEMA, "strict": True}
    assert parse_request(body(**fields)).response_format == expected


def test_no_output_format_and_effort_alone_are_free() -> None:
    assert parse_request(body()).response_format is None
    assert parse_request(body(output_config={"effort": "low"})).response_format is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        pytest.param(
            {"output_config": {"format": {"type": "json"}}}, "output_config.format.type", id="type"
        ),
        pytest.param(
            {"output_config": {"format": {"type": "json_schema"}}},
            "output_config.format.schema",
            id="no-schema",
        ),
        pytest.param(
            {"output_config": {"format": {"type": "json_schema", "schema": {"type": "strin"}}}},
            "output_config.format.schema",
            id="schema-does-not-compile",
        ),
        pytest.param(
            {"output_format": {"type": "json_schema", "schema": {"$ref": "#/nope"}}},
            "output_format.schema",
            id="beta-schema-does-not-compile",
        ),
        pytest.param(
            {
                "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
                "output_format": {"type": "json_schema", "schema": SCHEMA},
            },
            "output_format",
            id="both",
        ),
    ],
)
def test_bad_output_format_names_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_request(body(**fields))
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        pytest.param({"type": "any"}, ("required", True), id="any"),
        pytest.param(
            {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            ({"name": "get_weather"}, False),
            id="tool-not-parallel",
        ),
        pytest.param({"type": "none"}, ("none", True), id="none"),
        pytest.param(
            {"type": "auto", "disable_parallel_tool_use": True}, ("auto", False), id="auto-single"
        ),
    ],
)
def test_tool_choice_is_canonical(tool_choice: dict[str, Any], expected: tuple[Any, bool]) -> None:
    request = parse_request(body(tools=[WEATHER_TOOL], tool_choice=tool_choice))
    assert (request.tool_choice, request.parallel_tool_calls) == expected


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        pytest.param({"tool_choice": {"type": "any"}}, "tool_choice.type", id="any-without-tools"),
        pytest.param(
            {"tools": [WEATHER_TOOL], "tool_choice": {"type": "tool", "name": "other"}},
            "tool_choice.name",
            id="unknown-tool",
        ),
        pytest.param(
            {
                "tools": [{**WEATHER_TOOL, "input_schema": {"type": "strin"}}],
                "tool_choice": {"type": "any"},
            },
            "tools[0].input_schema",
            id="forced-tool-schema-does-not-compile",
        ),
    ],
)
def test_a_tool_choice_that_cannot_be_honoured_names_the_field(
    fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_request(body(**fields))
    assert caught.value.param == param
