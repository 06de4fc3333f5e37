"""The grammars of rltap.chat.constraints, driven by llguidance's matcher over the real Qwen
tokenizer: each accepts the replies the request allows (and the tool parser reads them as the
calls they are) and refuses the others."""

from __future__ import annotations

import json
from typing import Any

import llguidance
import llguidance.hf
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rltap.chat.constraints import (
    COMPACT_JSON,
    GrammarChecker,
    build_constraint,
    check_json_schema,
    check_request_schemas,
    grammar_checker,
    request_constraint,
)
from rltap.chat.lark_syntax import TokenSyntax
from rltap.chat.renderer import ChatRenderer
from rltap.chat.streaming import OutputParser, build_output_parser
from rltap.record.errors import InvalidRequest
from rltap.record.generation import CanonicalRequest
from rltap.record.types import Constraint

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
ADD = {"type": "function", "function": {"name": "add", "parameters": ADD_SCHEMA}}
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
WEATHER = {"type": "json_schema", "name": "Weather", "schema": WEATHER_SCHEMA, "strict": True}

HERMES_ADD = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
HERMES_LOOKUP = '<tool_call>\n{"name": "lookup", "arguments": {"query": "x"}}\n</tool_call>'
NO_THINKING = {"enable_thinking": False}


def _request(**fields: Any) -> CanonicalRequest:
    return CanonicalRequest(api="chat", model="tiny", messages=[], **fields)


@pytest.fixture(scope="module")
def llg_tokenizer(renderer: ChatRenderer) -> llguidance.LLTokenizer:
    return llguidance.hf.from_tokenizer(renderer.tokenizer)


@pytest.fixture
def accepts(renderer: ChatRenderer, llg_tokenizer: llguidance.LLTokenizer) -> Any:
    """`accepts(constraint, reply)`: the grammar takes every token of `reply` and is complete."""

    def check(constraint: Constraint, reply: str) -> bool:
        matcher = llguidance.LLMatcher(llg_tokenizer, constraint.grammar, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        ids = renderer.tokenizer.encode(reply, add_special_tokens=False)
        return bool(matcher.consume_tokens(ids)) and bool(matcher.is_accepting())

    return check


def _constraint(
    renderer: ChatRenderer, parser: OutputParser | None = None, **fields: Any
) -> Constraint:
    fields.setdefault("template_kwargs", NO_THINKING)
    constraint = request_constraint(
        _request(**fields), parser or build_output_parser("hermes", "qwen3"), renderer
    )
    assert constraint is not None
    return constraint


@pytest.mark.parametrize(
    ("reply", "ok"),
    [
        pytest.param('{"city":"Paris","days":3}', True, id="compact"),
        pytest.param('{"city": "Paris", "days": 3}', False, id="spaced"),
        pytest.param('{"city":"Paris","days":3} ', False, id="trailing-space"),
        pytest.param(' {"city":"Paris","days":3}', False, id="leading-space"),
        pytest.param('{\n"city":"Paris","days":3}', False, id="newline"),
        pytest.param('{"city":"Paris","days":"3"}', False, id="wrong-type"),
        pytest.param('{"city":"Paris"}', False, id="missing-key"),
        pytest.param('{"city":"Paris","days":3,"x":1}', False, id="extra-key"),
        pytest.param("Paris, 3 days", False, id="text"),
    ],
)
def test_json_schema_reply_is_one_compact_value(
    renderer: ChatRenderer, accepts: Any, reply: str, ok: bool
) -> None:
    constraint = _constraint(renderer, response_format=WEATHER)
    assert accepts(constraint, reply) is ok
    assert constraint.json_schema == {**WEATHER_SCHEMA, "x-guidance": COMPACT_JSON}
    assert constraint.reason == "response_format json_schema 'Weather'"


@pytest.mark.parametrize(
    ("reply", "ok"),
    [
        pytest.param('{"a":[1,{"b":null}]}', True, id="object"),
        pytest.param("{}", True, id="empty-object"),
        pytest.param("[1]", False, id="array"),
        pytest.param('"x"', False, id="string"),
        pytest.param('{"a": 1}', False, id="spaced"),
    ],
)
def test_json_object_reply_is_an_object(
    renderer: ChatRenderer, accepts: Any, reply: str, ok: bool
) -> None:
    constraint = _constraint(renderer, response_format={"type": "json_object"})
    assert accepts(constraint, reply) is ok


@settings(max_examples=40, deadline=None)
@given(
    # Control characters (DEL too) are written escaped under llguidance's JSON, never raw.
    city=st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=12),
    days=st.integers(min_value=-(10**6), max_value=10**6),
)
def test_every_schema_value_compact_is_accepted_and_indented_is_not(
    renderer: ChatRenderer, llg_tokenizer: llguidance.LLTokenizer, city: str, days: int
) -> None:
    constraint = _constraint(renderer, response_format=WEATHER)
    value = {"city": city, "days": days}

    def accepted(text: str) -> bool:
        matcher = llguidance.LLMatcher(llg_tokenizer, constraint.grammar, log_level=0)
        ids = renderer.tokenizer.encode(text, add_special_tokens=False)
        return bool(matcher.consume_tokens(ids)) and bool(matcher.is_accepting())

    assert accepted(orjson.dumps(value).decode())
    assert not accepted(json.dumps(value, indent=1))


def test_a_reasoning_block_may_come_first_while_thinking(
    renderer: ChatRenderer, accepts: Any
) -> None:
    thinking = _constraint(renderer, response_format=WEATHER, template_kwargs={})
    reply = '{"city":"Paris","days":3}'
    assert accepts(thinking, reply)
    assert accepts(thinking, f"<think>\nThe user wants JSON.\n</think>\n\n{reply}")
    assert not accepts(thinking, f"<think>hm</think>\n\n\n{reply}")  # no free whitespace
    assert thinking.json_schema is None  # the reply is not the JSON value alone
    not_thinking = _constraint(renderer, response_format=WEATHER)
    assert not accepts(not_thinking, f"<think>hm</think>{reply}")


def test_a_template_that_opens_the_reasoning_makes_the_reply_close_it(
    renderer: ChatRenderer, accepts: Any
) -> None:
    parser = build_output_parser("hermes", "deepseek_r1")
    constraint = _constraint(renderer, parser, response_format=WEATHER, template_kwargs={})
    assert accepts(constraint, 'Thinking.</think>\n\n{"city":"Paris","days":3}')
    assert not accepts(constraint, '{"city":"Paris","days":3}')


@pytest.mark.parametrize(
    ("reply", "ok"),
    [
        pytest.param(HERMES_ADD, True, id="one-call"),
        pytest.param(f"{HERMES_ADD}\n{HERMES_LOOKUP}", True, id="two-calls"),
        pytest.param("I will add them.", False, id="text"),
        pytest.param(f"Sure.\n{HERMES_ADD}", False, id="text-first"),
        pytest.param(HERMES_ADD.replace('"add"', '"mul"'), False, id="unknown-tool"),
        pytest.param(HERMES_ADD.replace('"a": 1', '"a": "1"'), False, id="bad-arguments"),
        pytest.param(HERMES_ADD.replace(', "b": 2', ""), False, id="missing-argument"),
        pytest.param(HERMES_ADD.replace('"a": 1', '"a":1'), False, id="compact-arguments"),
        pytest.param(HERMES_ADD.replace('"a": 1', '"a":  1'), False, id="padded-arguments"),
        pytest.param(f"{HERMES_ADD}\n", False, id="trailing-newline"),
    ],
)
def test_required_is_one_or_more_calls_of_the_tools(
    renderer: ChatRenderer, accepts: Any, reply: str, ok: bool
) -> None:
    constraint = _constraint(renderer, tools=[ADD, LOOKUP], tool_choice="required")
    assert accepts(constraint, reply) is ok
    assert constraint.json_schema is None


def test_parallel_false_allows_one_call_only(renderer: ChatRenderer, accepts: Any) -> None:
    required = _constraint(
        renderer, tools=[ADD, LOOKUP], tool_choice="required", parallel_tool_calls=False
    )
    assert accepts(required, HERMES_LOOKUP)
    assert not accepts(required, f"{HERMES_ADD}\n{HERMES_LOOKUP}")
    auto = _constraint(renderer, tools=[ADD, LOOKUP], parallel_tool_calls=False)
    assert accepts(auto, "No tool needed.")
    assert accepts(auto, f"Let me add.\n{HERMES_ADD}")
    assert not accepts(auto, f"{HERMES_ADD}\n{HERMES_LOOKUP}")
    assert not accepts(auto, f"{HERMES_ADD}\nDone.")
    assert auto.reason == "parallel_tool_calls false"


def test_a_named_tool_is_the_only_call(renderer: ChatRenderer, accepts: Any) -> None:
    constraint = _constraint(renderer, tools=[ADD, LOOKUP], tool_choice={"name": "lookup"})
    assert accepts(constraint, HERMES_LOOKUP)
    assert not accepts(constraint, HERMES_ADD)


def test_none_forbids_a_call(renderer: ChatRenderer, accepts: Any) -> None:
    constraint = _constraint(renderer, tools=[ADD], tool_choice="none")
    assert accepts(constraint, "The sum is 3.")
    assert accepts(constraint, "")
    assert not accepts(constraint, HERMES_ADD)
    assert not accepts(constraint, f"Here: {HERMES_ADD}")
    with_schema = _constraint(renderer, tools=[ADD], tool_choice="none", response_format=WEATHER)
    assert accepts(with_schema, '{"city":"Paris","days":3}')
    assert not accepts(with_schema, HERMES_ADD)


def test_tools_and_a_response_format_give_calls_or_the_value(
    renderer: ChatRenderer, accepts: Any
) -> None:
    constraint = _constraint(renderer, tools=[ADD], response_format=WEATHER)
    assert accepts(constraint, HERMES_ADD)
    assert accepts(constraint, '{"city":"Paris","days":3}')
    assert not accepts(constraint, "Paris")
    assert constraint.json_schema is None


@pytest.mark.parametrize(
    ("parser_name", "one_call", "two_calls"),
    [
        pytest.param("hermes", HERMES_ADD, f"{HERMES_ADD}\n{HERMES_LOOKUP}", id="hermes"),
        pytest.param(
            "llama3",
            '{"name": "add", "parameters": {"a": 1, "b": 2}}',
            '{"name": "add", "parameters": {"a": 1, "b": 2}}; '
            '{"name": "lookup", "parameters": {"query": "x"}}',
            id="llama3",
        ),
        pytest.param(
            "mistral",
            '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}]',
            '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}, '
            '{"name": "lookup", "arguments": {"query": "x"}}]',
            id="mistral-array",
        ),
    ],
)
def test_each_parser_reads_the_calls_its_grammar_allows(
    renderer: ChatRenderer, accepts: Any, parser_name: str, one_call: str, two_calls: str
) -> None:
    parser = build_output_parser(parser_name)
    required = _constraint(renderer, parser, tools=[ADD, LOOKUP], tool_choice="required")
    single = _constraint(
        renderer, parser, tools=[ADD, LOOKUP], tool_choice="required", parallel_tool_calls=False
    )
    assert accepts(required, one_call)
    assert accepts(required, two_calls)
    assert accepts(single, one_call)
    assert not accepts(single, two_calls)
    assert not accepts(required, one_call.replace('"add"', '"mul"'))
    parsed = parser.parse(two_calls)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("add", {"a": 1, "b": 2}),
        ("lookup", {"query": "x"}),
    ]
    none = _constraint(renderer, parser, tools=[ADD], tool_choice="none")
    assert accepts(none, "It is 3.")
    assert not accepts(none, one_call)


def test_llama3_text_under_none_does_not_start_like_a_call(
    renderer: ChatRenderer, accepts: Any
) -> None:
    constraint = _constraint(
        renderer, build_output_parser("llama3"), tools=[ADD], tool_choice="none"
    )
    assert accepts(constraint, "The set {1, 2}.")
    assert not accepts(constraint, '  {"x": 1}')
    assert not accepts(constraint, "ok <|python_tag|>")


def test_mistral_writes_name_form_calls_where_the_tokenizer_has_args_tokens() -> None:
    tokens = TokenSyntax({"[TOOL_CALLS]": 5, "[ARGS]": 32})
    constraint = build_constraint(
        _request(tools=[ADD], tool_choice="required"), build_output_parser("mistral"), tokens
    )
    assert constraint is not None
    assert 'call_0: <[5]> "add" <[32]> args_0' in constraint.grammar
    assert "calls: call+" in constraint.grammar


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({}, id="plain"),
        pytest.param({"tools": [ADD]}, id="tools-auto"),
        pytest.param({"tools": [ADD], "tool_choice": "auto"}, id="tools-auto-explicit"),
    ],
)
def test_a_free_request_has_no_constraint(renderer: ChatRenderer, fields: dict[str, Any]) -> None:
    assert request_constraint(_request(**fields), build_output_parser("hermes"), renderer) is None


def test_a_forced_tool_choice_needs_a_tool_parser(renderer: ChatRenderer) -> None:
    request = _request(tools=[ADD], tool_choice="required")
    with pytest.raises(InvalidRequest, match="tool parser") as caught:
        request_constraint(request, OutputParser(), renderer)
    assert caught.value.param == "tool_choice"
    # Without a parser nothing is a call: "none" and parallel false need no grammar.
    assert (
        request_constraint(_request(tools=[ADD], tool_choice="none"), OutputParser(), renderer)
        is None
    )


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        pytest.param({"type": "strin"}, "Invalid type", id="unknown-type"),
        pytest.param({"$ref": "#/$defs/missing"}, "does not exist", id="dangling-ref"),
        pytest.param({"type": "string", "pattern": "(?=a)"}, "look-around", id="lookaround"),
    ],
)
def test_a_schema_llguidance_cannot_compile_is_a_400_naming_the_field(
    schema: dict[str, Any], reason: str
) -> None:
    with pytest.raises(InvalidRequest, match=reason) as caught:
        check_json_schema(schema, "response_format.json_schema.schema")
    assert caught.value.param == "response_format.json_schema.schema"
    assert caught.value.status_code == 400
    assert "start:" not in caught.value.message  # llguidance's grammar excerpt is left out


def test_request_schemas_are_checked_only_where_the_grammar_holds_them() -> None:
    bad_tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "strin"}}}
    free = _request(tools=[ADD, bad_tool])
    check_request_schemas(free, schema_param="s", tool_param=lambda i: f"tools[{i}]")
    forced = _request(tools=[ADD, bad_tool], tool_choice="required")
    with pytest.raises(InvalidRequest) as caught:
        check_request_schemas(forced, schema_param="s", tool_param=lambda i: f"tools[{i}].x")
    assert caught.value.param == "tools[1].x"
    named = _request(tools=[ADD, bad_tool], tool_choice={"name": "add"})
    check_request_schemas(named, schema_param="s", tool_param=lambda i: f"tools[{i}]")


def test_a_checked_grammar_is_not_compiled_again(
    renderer: ChatRenderer, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = {"type": "object", "properties": {"only_here": {"type": "boolean"}}}
    request = _request(response_format={"type": "json_schema", "name": "x", "schema": schema})
    parser = build_output_parser("hermes")
    calls: list[str] = []
    validate = llguidance.LLMatcher.validate_grammar_with_warnings

    def counting(grammar: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(grammar)
        return validate(grammar, *args, **kwargs)

    monkeypatch.setattr(llguidance.LLMatcher, "validate_grammar_with_warnings", counting)
    for _ in range(3):
        check_json_schema(schema, "p")
        request_constraint(request, parser, renderer)
    assert len(calls) == 2  # the schema alone, and the whole grammar against the tokenizer
    assert grammar_checker(renderer) is grammar_checker(renderer)


class _SlowTokenizer:
    """Not a fast tokenizer: llguidance cannot read it."""

    def get_added_vocab(self) -> dict[str, int]:
        return {"<tool_call>": 151657, "</tool_call>": 151658}


def test_a_slow_tokenizer_still_has_its_grammars_checked() -> None:
    checker = GrammarChecker(_SlowTokenizer())
    request = _request(tools=[ADD], tool_choice={"name": "add"})
    constraint = build_constraint(request, build_output_parser("hermes"), checker.tokens)
    assert constraint is not None
    assert constraint.reason == "tool_choice function 'add'"
    checker.check(constraint, param="tool_choice")
    broken = Constraint(grammar='start: %json {"type": "strin"}', reason="a test")
    with pytest.raises(InvalidRequest, match="Invalid type") as caught:
        checker.check(broken, param="tool_choice")
    assert caught.value.param == "tool_choice"
