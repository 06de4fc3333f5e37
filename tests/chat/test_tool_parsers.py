"""Tool-call parsers (hermes/qwen, llama3, mistral) on whole outputs, and the generic registry."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rltap.chat.registry import Registry, UnknownNameError
from rltap.chat.tool_call_stream import partial_tag_len
from rltap.chat.tool_parsers import (
    TOOL_PARSERS,
    HermesToolParser,
    Llama3JsonToolParser,
    MistralToolParser,
    get_tool_parser,
)
from rltap.record.parsed import ParsedOutput, ParsedToolCall, fold_deltas, sequential_call_ids


def _calls(*pairs: tuple[str, str]) -> list[ParsedToolCall]:
    return [
        ParsedToolCall(id=f"call_{index:024x}", name=name, arguments=arguments)
        for index, (name, arguments) in enumerate(pairs)
    ]


HERMES_CASES = [
    pytest.param("Hello, world!", ParsedOutput("Hello, world!"), id="plain-text"),
    pytest.param(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
        "</tool_call>",
        ParsedOutput("", None, _calls(("get_weather", '{"city":"Paris","days":3}'))),
        id="one-call",
    ),
    pytest.param(
        "Let me check both.\n\n"
        '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>\n',
        ParsedOutput("Let me check both.", None, _calls(("a", '{"x":1}'), ("b", "{}"))),
        id="parallel-calls-after-text",
    ),
    pytest.param(
        'Before <tool_call>{"name": "a", "arguments": {}}</tool_call> after',
        ParsedOutput("Before  after", None, _calls(("a", "{}"))),
        id="text-around-call",
    ),
    pytest.param(
        '<tool_call>\n{"name": "a", "arguments": {oops}}\n</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"k": "v"}}</tool_call>',
        ParsedOutput(
            '<tool_call>\n{"name": "a", "arguments": {oops}}\n</tool_call>',
            None,
            _calls(("b", '{"k":"v"}')),
        ),
        id="invalid-json-stays-content",
    ),
    pytest.param(
        '<tool_call>{"arguments": {}}</tool_call>',
        ParsedOutput('<tool_call>{"arguments": {}}</tool_call>'),
        id="missing-name-stays-content",
    ),
    pytest.param(
        '<tool_call>{"name": "a", "arguments": [1, 2]}</tool_call>',
        ParsedOutput('<tool_call>{"name": "a", "arguments": [1, 2]}</tool_call>'),
        id="non-object-arguments-stay-content",
    ),
    pytest.param(
        '<tool_call>{"name": "a", "arguments": {"x": NaN}}</tool_call>',
        ParsedOutput('<tool_call>{"name": "a", "arguments": {"x": NaN}}</tool_call>'),
        id="nan-is-not-json",
    ),
    pytest.param(
        '<tool_call>{"name": "a", "arguments": "{\\"q\\": \\"x\\"}"}</tool_call>',
        ParsedOutput("", None, _calls(("a", '{"q":"x"}'))),
        id="arguments-as-json-string",
    ),
    pytest.param(
        '<tool_call>{"name": "a"}</tool_call>',
        ParsedOutput("", None, _calls(("a", "{}"))),
        id="missing-arguments-is-empty-object",
    ),
    pytest.param(
        'x <tool_call>{"name": "a", "arguments": {}}',
        ParsedOutput('x <tool_call>{"name": "a", "arguments": {}}'),
        id="unclosed-block-is-content",
    ),
    pytest.param(
        'one <tool_call>two <tool_call>{"name": "a", "arguments": {}}</tool_call>',
        ParsedOutput("one <tool_call>two", None, _calls(("a", "{}"))),
        id="reopened-block-makes-first-text",
    ),
    pytest.param(
        "The answer is 42 <tool_", ParsedOutput("The answer is 42 <tool_"), id="partial-tag"
    ),
    pytest.param(
        "a <tool> b <tool_calls> c", ParsedOutput("a <tool> b <tool_calls> c"), id="lookalike"
    ),
    pytest.param(
        '日本語 🎌<tool_call>{"name": "翻訳", "arguments": {"text": "こんにちは", "n": 1.5}}'
        "</tool_call>",
        ParsedOutput("日本語 🎌", None, _calls(("翻訳", '{"text":"こんにちは","n":1.5}'))),
        id="unicode",
    ),
]


@pytest.mark.parametrize(("text", "expected"), HERMES_CASES)
def test_hermes_parses_whole_output(text: str, expected: ParsedOutput) -> None:
    assert HermesToolParser().parse(text, new_id=sequential_call_ids()) == expected


LLAMA3_CASES = [
    pytest.param(
        '{"name": "search", "parameters": {"q": "rl"}}',
        ParsedOutput("", None, _calls(("search", '{"q":"rl"}'))),
        id="plain-json",
    ),
    pytest.param(
        '\n  <|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}',
        ParsedOutput("", None, _calls(("a", '{"x":1}'), ("b", "{}"))),
        id="python-tag-semicolons",
    ),
    pytest.param(
        'Searching now. <|python_tag|>{"name": "a", "arguments": {"x": [1, {"y": "}"}]}}',
        ParsedOutput("Searching now.", None, _calls(("a", '{"x":[1,{"y":"}"}]}'))),
        id="text-then-tag-arguments-key",
    ),
    pytest.param(
        'Use {"name": "a", "parameters": {}} like this',
        ParsedOutput('Use {"name": "a", "parameters": {}} like this'),
        id="json-mid-text-is-content",
    ),
    pytest.param('{"answer": 42}', ParsedOutput('{"answer": 42}'), id="json-not-a-call"),
    pytest.param(
        '{"name": "a", "parameters": {"q": }}',
        ParsedOutput('{"name": "a", "parameters": {"q": }}'),
        id="invalid-json",
    ),
    pytest.param(
        '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {bad}} tail',
        ParsedOutput('; {"name": "b", "parameters": {bad}} tail', None, _calls(("a", "{}"))),
        id="valid-then-invalid",
    ),
    pytest.param(
        '<|python_tag|>brave_search.call(query="x")',
        ParsedOutput('<|python_tag|>brave_search.call(query="x")'),
        id="builtin-tool-code-is-content",
    ),
    pytest.param("hello <|python", ParsedOutput("hello <|python"), id="partial-tag"),
    pytest.param(
        '{"name": "a", "parameters": {',
        ParsedOutput('{"name": "a", "parameters": {'),
        id="unclosed",
    ),
]


@pytest.mark.parametrize(("text", "expected"), LLAMA3_CASES)
def test_llama3_parses_whole_output(text: str, expected: ParsedOutput) -> None:
    assert Llama3JsonToolParser().parse(text, new_id=sequential_call_ids()) == expected


MISTRAL_CASES = [
    pytest.param(
        '[TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]',
        ParsedOutput("", None, _calls(("a", '{"x":1}'), ("b", "{}"))),
        id="array-form",
    ),
    pytest.param(
        'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}',
        ParsedOutput(
            "Sure.", None, _calls(("get_weather", '{"city":"Paris"}'), ("get_time", "{}"))
        ),
        id="name-args-form",
    ),
    pytest.param(
        '[TOOL_CALLS]echo[ARGS]{"s": "}]{[\\"x"} done',
        ParsedOutput("done", None, _calls(("echo", '{"s":"}]{[\\"x"}'))),
        id="brackets-and-escapes-in-strings",
    ),
    pytest.param(
        '[TOOL_CALLS]a[ARGS]{"x": 1,}',
        ParsedOutput('[TOOL_CALLS]a[ARGS]{"x": 1,}'),
        id="invalid-json",
    ),
    pytest.param(
        '[TOOL_CALLS]bad name[ARGS]{"x": 1}',
        ParsedOutput('[TOOL_CALLS]bad name[ARGS]{"x": 1}'),
        id="bad-name",
    ),
    pytest.param(
        "[TOOL_CALLS]a[ARGS][1]", ParsedOutput("[TOOL_CALLS]a[ARGS][1]"), id="args-not-object"
    ),
    pytest.param("[TOOL_CALLS] []", ParsedOutput("[TOOL_CALLS] []"), id="empty-array"),
    pytest.param("ok [TOOL_CA", ParsedOutput("ok [TOOL_CA"), id="partial-tag"),
    pytest.param("[TOOL_CALLS]fn[AR", ParsedOutput("[TOOL_CALLS]fn[AR"), id="partial-args-tag"),
]


@pytest.mark.parametrize(("text", "expected"), MISTRAL_CASES)
def test_mistral_parses_whole_output(text: str, expected: ParsedOutput) -> None:
    assert MistralToolParser().parse(text, new_id=sequential_call_ids()) == expected


def test_default_ids_are_random_hex_and_distinct() -> None:
    block = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    calls = get_tool_parser("hermes").parse(block * 3).tool_calls
    assert [call.name for call in calls] == ["a", "a", "a"]
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", call.id) for call in calls)
    assert len({call.id for call in calls}) == 3


def test_injected_id_factory_is_used_in_order() -> None:
    ids = iter(["call_1", "call_2"])
    text = '<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b"}</tool_call>'
    parsed = get_tool_parser("qwen").parse(text, new_id=lambda: next(ids))
    assert [(call.id, call.name) for call in parsed.tool_calls] == [
        ("call_1", "a"),
        ("call_2", "b"),
    ]


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        pytest.param("hermes", HermesToolParser, id="hermes"),
        pytest.param("qwen", HermesToolParser, id="qwen"),
        pytest.param("llama3", Llama3JsonToolParser, id="llama3"),
        pytest.param("mistral", MistralToolParser, id="mistral"),
    ],
)
def test_get_tool_parser_by_name(name: str, cls: type) -> None:
    assert type(get_tool_parser(name)) is cls
    assert name in TOOL_PARSERS.names()


def test_unknown_tool_parser_lists_known_names() -> None:
    known = r"unknown tool parser 'nope'; known: .*hermes.*mistral.*qwen"
    with pytest.raises(UnknownNameError, match=known):
        get_tool_parser("nope")


@pytest.mark.parametrize(
    ("text", "held"),
    [
        pytest.param("abc<", 1, id="one-char"),
        pytest.param("abc<tool_ca", 8, id="most-of-tag"),
        pytest.param("abc<tool_call>", 0, id="whole-tag-not-held"),
        pytest.param("abc<tx", 0, id="diverged"),
        pytest.param("", 0, id="empty"),
    ],
)
def test_partial_tag_len(text: str, held: int) -> None:
    assert partial_tag_len(text, ("<tool_call>", "</tool_call>")) == held


FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_",
    "\n",
    " ",
    "hi",
    "é🎌",
    '{"name": "f", "arguments": {"a": 1}}',
    '{"name": "g"}',
    '{"name": ',
    "{bad}",
    "}",
    '"',
]


def _reference_hermes(text: str) -> tuple[str, list[tuple[str, str]]]:
    """An independent regex reading of the hermes rules, to check the state machine against:
    the text outside calls, less its leading whitespace if a call comes before its first visible
    character and its trailing whitespace if a call comes after its last one."""
    content: list[str] = []
    calls: list[tuple[str, str]] = []
    call_at: list[int] = []  # the length of the content when each call came
    position = 0
    for match in re.finditer(r"<tool_call>((?:(?!<tool_call>).)*?)</tool_call>", text, re.S):
        content.append(text[position : match.start()])
        position = match.end()
        try:
            obj = json.loads(match.group(1), parse_constant=lambda c: 1 / 0)
        except (ValueError, ZeroDivisionError):
            obj = None
        args = obj.get("arguments", {}) if isinstance(obj, dict) else None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str) and isinstance(args, dict):
            calls.append((obj["name"], json.dumps(args, separators=(",", ":"), ensure_ascii=False)))
            call_at.append(len("".join(content)))
        else:
            content.append(match.group(0))
    content.append(text[position:])
    joined = "".join(content)
    first = len(joined) - len(joined.lstrip())  # where the visible text begins
    last = len(joined.rstrip())  # and ends
    if not joined.strip():
        return ("" if calls else joined), calls
    start = first if any(at <= first for at in call_at) else 0
    end = last if any(at >= last for at in call_at) else len(joined)
    return joined[start:end], calls


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join))
def test_hermes_agrees_with_regex_reference(text: str) -> None:
    parsed = HermesToolParser().parse(text)
    assert (
        parsed.content,
        [(c.name, c.arguments) for c in parsed.tool_calls],
    ) == _reference_hermes(text)


MARKUP = [*FRAGMENTS, "<|python_tag|>", ";", "[TOOL_CALLS]", "[ARGS]", "[", "]", "fn", "{}"]


@pytest.mark.parametrize("name", ["hermes", "llama3", "mistral"])
@given(text=st.lists(st.sampled_from(MARKUP) | st.text(max_size=3), max_size=12).map("".join))
def test_no_call_means_text_is_kept_verbatim(name: str, text: str) -> None:
    parsed = get_tool_parser(name).parse(text)
    if not parsed.tool_calls:
        assert parsed.content == text
    for call in parsed.tool_calls:
        assert isinstance(json.loads(call.arguments), dict)


def test_registry_decorator_aliases_and_names() -> None:
    registry: Registry[type[object]] = Registry("widget")

    @registry.register("alpha", "a")
    class Alpha:
        pass

    registry.register_lazy("hermes", "rltap.chat.tool_parsers:HermesToolParser", "h")
    assert registry.names() == ["a", "alpha", "h", "hermes"]
    assert registry.get("a") is Alpha
    assert registry.get("h") is HermesToolParser
    assert registry.get("hermes") is HermesToolParser
    assert "alpha" in registry
    assert "beta" not in registry


def test_registry_rejects_duplicates_and_bad_targets() -> None:
    registry: Registry[int] = Registry("number")
    registry.register("one")(1)
    with pytest.raises(ValueError, match="'one' is already registered"):
        registry.register("uno", "one")(1)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_lazy("one", "math:pi")
    with pytest.raises(ValueError, match="module:attribute"):
        registry.register_lazy("two", "math.pi")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        pytest.param("rltap.no_such_module:x", "cannot import number", id="missing-module"),
        pytest.param("math:no_such_attr", "has no number 'no_such_attr'", id="missing-attr"),
    ],
)
def test_registry_lazy_import_failure_is_clear(target: str, message: str) -> None:
    registry: Registry[int] = Registry("number")
    registry.register_lazy("broken", target)
    with pytest.raises(ImportError, match=message):
        registry.get("broken")


def test_registry_unknown_name_with_empty_registry() -> None:
    with pytest.raises(UnknownNameError, match="unknown thing 'x'; known: none"):
        Registry[int]("thing").get("x")


@pytest.mark.parametrize("name", ["hermes", "mistral"])
@given(text=st.lists(st.sampled_from(MARKUP) | st.text(max_size=3), max_size=12).map("".join))
def test_whole_parse_equals_the_stream_with_or_without_a_tag(name: str, text: str) -> None:
    # `parse` skips the state machine when no opening tag occurs; the result must not change.
    parser = get_tool_parser(name)
    assert parser.opening_tags
    stream = parser.stream(new_id=sequential_call_ids())
    streamed = fold_deltas([*stream.feed(text), *stream.finish()])
    assert parser.parse(text, new_id=sequential_call_ids()) == streamed
