"""Chat Completions `response_format` and the schemas a grammar will hold, checked on parsing."""

from __future__ import annotations

from typing import Any

import pytest

from rltap.record.errors import InvalidRequest

from .support import request

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "strin"}}}


@pytest.mark.parametrize(
    ("response_format", "expected"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param({"type": "text"}, None, id="text"),
        pytest.param({"type": "json_object"}, {"type": "json_object"}, id="json-object"),
        pytest.param(
            {"type": "json_schema", "json_schema": {"name": "W", "schema": SCHEMA, "strict": True}},
            {"type": "json_schema", "name": "W", "schema": SCHEMA, "strict": True},
            id="json-schema-strict",
        ),
        pytest.param(
            {"type": "json_schema", "json_schema": {"name": "W", "schema": SCHEMA}},
            {"type": "json_schema", "name": "W", "schema": SCHEMA, "strict": False},
            id="json-schema-not-strict",
        ),
        pytest.param(
            {"type": "json_schema", "json_schema": {"name": "W"}},
            {"type": "json_schema", "name": "W", "schema": {}, "strict": False},
            id="json-schema-without-schema",
        ),
    ],
)
def test_response_format_is_canonical(
    response_format: dict[str, Any] | None, expected: dict[str, Any] | None
) -> None:
    fields = {} if response_format is None else {"response_format": response_format}
    assert request(**fields).response_format == expected


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        pytest.param({"type": "xml"}, "response_format.type", id="unknown-type"),
        pytest.param({"json_schema": {"name": "W"}}, "response_format.type", id="no-type"),
        pytest.param({"type": "json_schema"}, "response_format.json_schema", id="no-json-schema"),
        pytest.param(
            {"type": "json_schema", "json_schema": {"schema": SCHEMA}},
            "response_format.json_schema.name",
            id="no-name",
        ),
        pytest.param(
            {"type": "json_schema", "json_schema": {"name": "W", "schema": [1]}},
            "response_format.json_schema.schema",
            id="schema-not-an-object",
        ),
        pytest.param(
            {"type": "json_schema", "json_schema": {"name": "W", "schema": {"type": "strin"}}},
            "response_format.json_schema.schema",
            id="schema-does-not-compile",
        ),
        pytest.param("json", "response_format", id="a-string"),
    ],
)
def test_bad_response_format_names_the_field(response_format: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        request(response_format=response_format)
    assert caught.value.param == param


def test_a_forced_tool_with_a_schema_that_does_not_compile_names_its_parameters() -> None:
    request(tools=[TOOL])  # not in any grammar: not checked
    with pytest.raises(InvalidRequest, match="Invalid type") as caught:
        request(tools=[TOOL], tool_choice="required")
    assert caught.value.param == "tools[0].function.parameters"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({"tool_choice": "required"}, ("required", True), id="required"),
        pytest.param({"tool_choice": "none"}, ("none", True), id="none"),
        pytest.param(
            {"tool_choice": {"type": "function", "function": {"name": "g"}}},
            ({"name": "g"}, True),
            id="named",
        ),
        pytest.param({"parallel_tool_calls": False}, (None, False), id="parallel-false"),
    ],
)
def test_tool_choice_and_parallel_calls_are_canonical(
    fields: dict[str, Any], expected: tuple[Any, bool]
) -> None:
    tool = {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}
    parsed = request(tools=[tool], **fields)
    assert (parsed.tool_choice, parsed.parallel_tool_calls) == expected
