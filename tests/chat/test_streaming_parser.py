"""Streaming parser: any cut of a reply into pieces folds to the same result as parsing it whole."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rltap.chat.registry import UnknownNameError
from rltap.chat.streaming import OutputParser, build_output_parser, build_streaming_parser
from rltap.record.parsed import (
    ContentDelta,
    Delta,
    ParsedOutput,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
    fold_deltas,
    sequential_call_ids,
)


def _call(index: int, name: str, arguments: str) -> ParsedToolCall:
    return ParsedToolCall(id=f"call_{index:024x}", name=name, arguments=arguments)


HERMES_CALL = '<tool_call>\n{"name": "get", "arguments": {"city": "Zürich"}}\n</tool_call>'
HERMES_ARGS = '{"city":"Zürich"}'

# (tool parser, reasoning parser, starts_in_reasoning, text, expected)
SAMPLES = [
    pytest.param(
        "hermes",
        "qwen3",
        None,
        f"<think>\nCheck the weather.\n</think>\n\nSure!\n{HERMES_CALL}\n{HERMES_CALL}",
        ParsedOutput(
            "Sure!",
            "Check the weather.",
            [_call(0, "get", HERMES_ARGS), _call(1, "get", HERMES_ARGS)],
        ),
        id="hermes-reasoning-two-calls",
    ),
    pytest.param(
        "hermes",
        "qwen3",
        None,
        f"<think>use {HERMES_CALL}?</think> no",
        ParsedOutput("no", f"use {HERMES_CALL}?"),
        id="hermes-call-inside-reasoning",
    ),
    pytest.param(
        "hermes",
        None,
        None,
        'A <tool_call>{"name": "x", "arguments": {bad}}</tool_call> B <tool_call>{"name": "ok"}'
        "</tool_call> C",
        ParsedOutput(
            'A <tool_call>{"name": "x", "arguments": {bad}}</tool_call> B  C',
            None,
            [_call(0, "ok", "{}")],
        ),
        id="hermes-invalid-json-and-text-around",
    ),
    pytest.param(
        "qwen",
        None,
        None,
        "Ünïcødé 🎌 ends with <tool_",
        ParsedOutput("Ünïcødé 🎌 ends with <tool_"),
        id="hermes-unicode-partial-tag",
    ),
    pytest.param(
        "hermes",
        "deepseek_r1",
        None,
        f"hmm </thin> still\n</think>\n{HERMES_CALL} <tool_call>",
        ParsedOutput("<tool_call>", "hmm </thin> still", [_call(0, "get", HERMES_ARGS)]),
        id="hermes-starts-in-reasoning-unclosed-tag",
    ),
    pytest.param(
        "hermes",
        "qwen3",
        None,
        "<think>no end <tool_call>",
        ParsedOutput("", "no end <tool_call>"),
        id="hermes-unclosed-reasoning",
    ),
    pytest.param(
        "llama3",
        "qwen3",
        None,
        '<think>go</think>\n{"name": "a", "parameters": {"q": "é"}};'
        ' {"name": "b", "parameters": {}}',
        ParsedOutput("", "go", [_call(0, "a", '{"q":"é"}'), _call(1, "b", "{}")]),
        id="llama3-reasoning-two-calls",
    ),
    pytest.param(
        "llama3",
        None,
        None,
        'See: <|python_tag|>{"name": "a", "parameters": {"s": "}{"}} ; {oops}',
        ParsedOutput("See:  ; {oops}", None, [_call(0, "a", '{"s":"}{"}')]),
        id="llama3-tag-then-invalid",
    ),
    pytest.param(
        "llama3",
        None,
        None,
        "plain text <|python_t",
        ParsedOutput("plain text <|python_t"),
        id="llama3-partial-tag",
    ),
    pytest.param(
        "mistral",
        None,
        None,
        'Ok[TOOL_CALLS]get_w[ARGS]{"c": "P"}[TOOL_CALLS] [{"name": "t", "arguments": {}}] end',
        ParsedOutput("Ok end", None, [_call(0, "get_w", '{"c":"P"}'), _call(1, "t", "{}")]),
        id="mistral-both-forms",
    ),
    pytest.param(
        "mistral",
        "qwen3",
        None,
        '<think>x</think>[TOOL_CALLS]f[ARGS]{"a": 1,}[TOOL_CALLS]g[AR',
        ParsedOutput('[TOOL_CALLS]f[ARGS]{"a": 1,}[TOOL_CALLS]g[AR', "x"),
        id="mistral-invalid-then-partial",
    ),
    pytest.param(
        None,
        "qwen3",
        None,
        "  <think> a </think>  b  ",
        ParsedOutput("b  ", "a"),
        id="reasoning-only",
    ),
]


def _run(parser: OutputParser, pieces: list[str]) -> tuple[ParsedOutput, list[Delta]]:
    stream = parser.stream(new_id=sequential_call_ids())
    deltas = [delta for piece in pieces for delta in stream.feed(piece)]
    deltas.extend(stream.finish())
    return fold_deltas(deltas), deltas


def _cuts(text: str, points: list[int]) -> list[str]:
    bounds = [0, *sorted(set(points)), len(text)]
    return [text[start:end] for start, end in pairwise(bounds)]


def _every_split(text: str) -> Iterator[list[str]]:
    """Every cut into two and three pieces, and one character at a time."""
    yield list(text)
    for first in range(len(text) + 1):
        yield _cuts(text, [first])
        for second in range(first + 1, len(text)):
            yield _cuts(text, [first, second])


@pytest.mark.parametrize(("tool", "reasoning", "flag", "text", "expected"), SAMPLES)
def test_every_split_matches_whole_parse(
    tool: str | None, reasoning: str | None, flag: bool | None, text: str, expected: ParsedOutput
) -> None:
    parser = build_output_parser(tool, reasoning, flag)
    assert parser.parse(text, new_id=sequential_call_ids()) == expected
    for pieces in _every_split(text):
        folded, _ = _run(parser, pieces)
        assert folded == expected, pieces


CONFIGS = [
    ("hermes", "qwen3", None),
    ("hermes", "qwen3", True),
    ("llama3", None, None),
    ("llama3", "qwen3", None),
    ("mistral", None, None),
    ("mistral", "deepseek_r1", None),
]

FRAGMENTS = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "fn",
    '{"name": "f", "arguments": {"a": "é"}}',
    '{"name": "g", "parameters": {}}',
    '[{"name": "h"}]',
    "{}",
    "{bad",
    "}",
    ";",
    '"',
    "\\",
    " ",
    "\n",
    "<",
    "[",
]


@settings(max_examples=300, deadline=None)
@given(
    config=st.sampled_from(CONFIGS),
    text=st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=2), max_size=14).map("".join),
    points=st.lists(st.integers(min_value=0, max_value=200), max_size=8),
)
def test_random_splits_match_whole_parse(
    config: tuple[str, str | None, bool | None], text: str, points: list[int]
) -> None:
    parser = build_output_parser(*config)
    whole = parser.parse(text, new_id=sequential_call_ids())
    folded, deltas = _run(parser, _cuts(text, [p for p in points if p < len(text)]))
    assert folded == whole
    assert all(getattr(delta, "text", "x") for delta in deltas), "no empty text deltas"


def test_holds_back_only_a_possible_tag() -> None:
    stream = build_streaming_parser("hermes", new_id=sequential_call_ids())
    assert stream.feed("Hello <tool_") == [ContentDelta("Hello")]
    assert stream.feed("box> and") == [ContentDelta(" <tool_box> and")]
    assert stream.feed(' <tool_call>{"name": "f"') == []
    assert stream.feed(', "arguments": {"a": 1}}</tool_call>') == [
        ToolCallStartDelta(0, "call_" + "0" * 24, "f"),
        ToolCallArgumentsDelta(0, '{"a":1}'),
    ]
    assert stream.feed(" bye\n") == [ContentDelta("  bye")]
    assert stream.finish() == [ContentDelta("\n")]


def test_reasoning_streams_before_close_tag() -> None:
    stream = build_streaming_parser("hermes", "qwen3")
    assert stream.feed("<think>\nstep one") == [ReasoningDelta("step one")]
    assert stream.feed(", two</thi") == [ReasoningDelta(", two")]
    assert stream.feed("nk>\n\nAnswer") == [ContentDelta("Answer")]


@pytest.mark.parametrize(
    ("tool", "reasoning", "text", "flushed"),
    [
        pytest.param("hermes", None, "x <tool_call>{", [ContentDelta(" <tool_call>{")], id="block"),
        pytest.param("hermes", None, "x <tool", [ContentDelta(" <tool")], id="partial-tag"),
        pytest.param("hermes", "qwen3", "<think>a</thi", [ReasoningDelta("</thi")], id="think"),
        pytest.param(
            "mistral", None, "x [TOOL_CALLS]f[A", [ContentDelta(" [TOOL_CALLS]f[A")], id="m"
        ),
        pytest.param("llama3", None, '{"name": "f"', [ContentDelta('{"name": "f"')], id="json"),
    ],
)
def test_finish_flushes_held_text(
    tool: str, reasoning: str | None, text: str, flushed: list[Delta]
) -> None:
    stream = build_streaming_parser(tool, reasoning)
    stream.feed(text)
    assert stream.finish() == flushed
    assert stream.finish() == []
    with pytest.raises(RuntimeError, match="after finish"):
        stream.feed("more")


@pytest.mark.parametrize(
    ("tool", "reasoning", "text", "expected"),
    [
        pytest.param(
            "hermes", None, 'x <tool_call>\n{"name": "f", "argu', ParsedOutput("x"), id="block"
        ),
        pytest.param(
            "hermes",
            None,
            f'{HERMES_CALL}\n<tool_call>\n{{"name": "get"',
            ParsedOutput("", None, [_call(0, "get", HERMES_ARGS)]),
            id="after-a-whole-call",
        ),
        # Not yet markup: text, as in a reply that ends there.
        pytest.param("hermes", None, "x <tool", ParsedOutput("x <tool"), id="partial-tag"),
        pytest.param(
            "hermes", "qwen3", "<think>a</thi", ParsedOutput("", "a</thi"), id="in-reasoning"
        ),
        pytest.param("mistral", None, "x [TOOL_CALLS]f[A", ParsedOutput("x"), id="mistral"),
        pytest.param("llama3", None, '{"name": "f", "param', ParsedOutput(""), id="llama3-json"),
    ],
)
def test_a_reply_cut_by_the_token_limit_drops_the_call_it_left_open(
    tool: str, reasoning: str | None, text: str, expected: ParsedOutput
) -> None:
    parser = build_output_parser(tool, reasoning)
    assert parser.parse(text, new_id=sequential_call_ids(), truncated=True) == expected
    for pieces in _every_split(text):
        stream = parser.stream(new_id=sequential_call_ids())
        deltas = [delta for piece in pieces for delta in stream.feed(piece)]
        assert fold_deltas([*deltas, *stream.finish(truncated=True)]) == expected, pieces


# The text a client is shown: the decoded reply less only the markup the parsers turn into fields,
# the whitespace touching that markup included (chat templates write it themselves:
# `<think>\n...\n</think>\n\n` + content, content + `\n<tool_call>`).
EXACT_TEXT = [
    pytest.param("line one\n", ParsedOutput("line one\n"), id="trailing-newline-kept"),
    pytest.param("   indented\n\n", ParsedOutput("   indented\n\n"), id="leading-spaces-kept"),
    pytest.param(" \n\t", ParsedOutput(" \n\t"), id="only-whitespace-kept"),
    pytest.param(
        "<think>\nweigh it\n</think>\n\n  Answer:\n42\n",
        ParsedOutput("Answer:\n42\n", "weigh it"),
        id="reasoning-then-content",
    ),
    pytest.param(
        "<think>\n\n</think>\n\nHi \n", ParsedOutput("Hi \n"), id="empty-reasoning-then-content"
    ),
    pytest.param(
        f"Let me check.\n{HERMES_CALL}",
        ParsedOutput("Let me check.", None, [_call(0, "get", HERMES_ARGS)]),
        id="content-then-call",
    ),
    pytest.param(
        f"<think>\nhm\n</think>\n\n  Two:\n\n{HERMES_CALL}\n{HERMES_CALL}\n",
        ParsedOutput("Two:", "hm", [_call(0, "get", HERMES_ARGS), _call(1, "get", HERMES_ARGS)]),
        id="reasoning-content-calls",
    ),
    pytest.param(
        f"Before:\n{HERMES_CALL}\nAfter.\n",
        ParsedOutput("Before:\n\nAfter.\n", None, [_call(0, "get", HERMES_ARGS)]),
        id="text-on-both-sides-of-a-call",
    ),
    pytest.param(
        " x <tool_call>{bad}</tool_call> \n",
        ParsedOutput(" x <tool_call>{bad}</tool_call> \n"),
        id="invalid-call-is-text-with-its-whitespace",
    ),
]


@pytest.mark.parametrize(("text", "expected"), EXACT_TEXT)
def test_content_is_the_decoded_text_less_the_markup(text: str, expected: ParsedOutput) -> None:
    parser = build_output_parser("hermes", "qwen3")
    assert parser.parse(text, new_id=sequential_call_ids()) == expected
    for pieces in _every_split(text):
        folded, _ = _run(parser, pieces)
        assert folded == expected, pieces


def test_without_parsers_content_is_verbatim() -> None:
    stream = build_streaming_parser(None)
    deltas = [*stream.feed("  a <tool_call>"), *stream.feed(" b \n"), *stream.finish()]
    assert fold_deltas(deltas) == ParsedOutput("  a <tool_call> b \n")


def test_unknown_names_and_bad_flag_are_rejected() -> None:
    with pytest.raises(UnknownNameError, match="unknown reasoning parser 'nope'"):
        build_streaming_parser("hermes", "nope")
    with pytest.raises(ValueError, match="needs a reasoning parser"):
        build_streaming_parser("hermes", None, True)


def test_fold_rejects_arguments_before_start() -> None:
    with pytest.raises(ValueError, match="before its start"):
        fold_deltas([ToolCallArgumentsDelta(0, "{}")])
