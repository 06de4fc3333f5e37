"""Responses `text.format`, and the schemas a grammar will hold, checked at parse time."""

from __future__ import annotations

from typing import Any

import pytest

from rltap.protocols import openai_responses as proto
from rltap.record.errors import InvalidRequest

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
FUNCTION = {"type": "function", "name": "g", "parameters": {"type": "object"}}


def _parse(**fields: Any) -> Any:
    return proto.parse_request({"model": "m", "input": "hi", **fields})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param({}, None, id="no-format"),
        pytest.param({"format": {"type": "text"}}, None, id="text"),
        pytest.param({"verbosity": "low"}, None, id="verbosity-only"),
        pytest.param({"format": {"type": "json_object"}}, {"type": "json_object"}, id="json"),
        pytest.param(
            {"format": {"type": "json_schema", "name": "W", "schema": SCHEMA, "strict": True}},
            {"type": "json_schema", "name": "W", "schema": SCHEMA, "strict": True},
            id="json-schema",
        ),
        pytest.param(
            {"format": {"type": "json_schema", "name": "W", "schema": SCHEMA}},
            {"type": "json_schema", "name": "W", "schema": SCHEMA, "strict": False},
            id="json-schema-not-strict",
        ),
    ],
)
def test_text_format_is_canonical(text: dict[str, Any], expected: dict[str, Any] | None) -> None:
    assert _parse(text=text).response_format == expected


@pytest.mark.parametrize(
    ("text", "param"),
    [
        pytest.param({"format": {"type": "xml"}}, "text.format.type", id="unknown-type"),
        pytest.param(
            {"format": {"type": "json_schema", "schema": SCHEMA}},
            "text.format.name",
            id="no-name",
        ),
        pytest.param(
            {"format": {"type": "json_schema", "name": "W", "schema": "x"}},
            "text.format.schema",
            id="schema-not-an-object",
        ),
        pytest.param(
            {"format": {"type": "json_schema", "name": "W", "schema": {"$ref": "#/nope"}}},
            "text.format.schema",
            id="schema-does-not-compile",
        ),
        pytest.param({"format": "json"}, "text.format", id="format-a-string"),
    ],
)
def test_bad_text_format_names_the_field(text: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _parse(text=text)
    assert caught.value.param == param


def test_a_forced_tool_with_a_schema_that_does_not_compile_names_its_parameters() -> None:
    bad = {**FUNCTION, "parameters": {"type": "strin"}}
    with pytest.raises(InvalidRequest) as caught:
        _parse(tools=[FUNCTION, bad], tool_choice="required")
    assert caught.value.param == "tools[1].parameters"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({"tool_choice": "required"}, ("required", True), id="required"),
        pytest.param({"tool_choice": "none"}, ("none", True), id="none"),
        pytest.param(
            {"tool_choice": {"type": "function", "name": "g"}}, ({"name": "g"}, True), id="named"
        ),
        pytest.param({"parallel_tool_calls": False}, (None, False), id="parallel-false"),
    ],
)
def test_tool_choice_and_parallel_calls_are_canonical(
    fields: dict[str, Any], expected: tuple[Any, bool]
) -> None:
    parsed = _parse(tools=[FUNCTION], **fields)
    assert (parsed.tool_choice, parsed.parallel_tool_calls) == expected
