"""Reasoning parsers (`<think>` blocks) alone and combined with a tool parser."""

from __future__ import annotations

import pytest

from rltap.chat.reasoning import (
    REASONING_PARSERS,
    DeepSeekR1ReasoningParser,
    Qwen3ReasoningParser,
    ReasoningSplit,
    get_reasoning_parser,
)
from rltap.chat.registry import UnknownNameError
from rltap.chat.streaming import build_output_parser, parse_output
from rltap.chat.tool_parsers import get_tool_parser
from rltap.record.parsed import ParsedOutput, ParsedToolCall, sequential_call_ids


@pytest.mark.parametrize(
    ("text", "starts_in_reasoning", "expected"),
    [
        pytest.param("Hi there", False, ReasoningSplit(None, "Hi there"), id="no-block"),
        pytest.param(
            "<think>\nweigh it\n</think>\n\nAnswer",
            False,
            ReasoningSplit("weigh it", "Answer"),
            id="block-then-content",
        ),
        pytest.param(
            "  \n<think>x</think>y", False, ReasoningSplit("x", "y"), id="blank-before-block"
        ),
        pytest.param(
            "<think>still going", False, ReasoningSplit("still going", ""), id="unclosed-block"
        ),
        pytest.param(
            "Sure. <think>a</think>b",
            False,
            ReasoningSplit(None, "Sure. <think>a</think>b"),
            id="late-block-is-content",
        ),
        pytest.param("<think></think>ok", False, ReasoningSplit(None, "ok"), id="empty-block"),
        pytest.param("<thi", False, ReasoningSplit(None, "<thi"), id="partial-open-tag-at-end"),
        pytest.param(
            "<think>a</thi", False, ReasoningSplit("a</thi", ""), id="partial-close-tag-at-end"
        ),
        pytest.param(
            "plan it\n</think>\n\ndone",
            True,
            ReasoningSplit("plan it", "done"),
            id="starts-in-reasoning",
        ),
        pytest.param(
            "<think>plan</think>done",
            True,
            ReasoningSplit("plan", "done"),
            id="starts-in-reasoning-repeated-open-tag",
        ),
        pytest.param(
            "all thought",
            True,
            ReasoningSplit("all thought", ""),
            id="starts-in-reasoning-unclosed",
        ),
        pytest.param(
            "a</think>b</think>c", True, ReasoningSplit("a", "b</think>c"), id="first-close-ends"
        ),
    ],
)
def test_split(text: str, starts_in_reasoning: bool, expected: ReasoningSplit) -> None:
    parser = get_reasoning_parser("qwen3")
    assert parser.split(text, starts_in_reasoning=starts_in_reasoning) == expected


def test_deepseek_r1_starts_in_reasoning_by_default() -> None:
    assert get_reasoning_parser("deepseek_r1").split("hm</think>A") == ReasoningSplit("hm", "A")
    assert get_reasoning_parser("qwen3").split("hm</think>A") == ReasoningSplit(None, "hm</think>A")


def test_explicit_flag_overrides_default() -> None:
    parser = DeepSeekR1ReasoningParser()
    assert parser.split("plain", starts_in_reasoning=False) == ReasoningSplit(None, "plain")


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        pytest.param("qwen3", Qwen3ReasoningParser, id="qwen3"),
        pytest.param("deepseek_r1", DeepSeekR1ReasoningParser, id="deepseek_r1"),
    ],
)
def test_get_reasoning_parser_by_name(name: str, cls: type) -> None:
    assert type(get_reasoning_parser(name)) is cls
    assert name in REASONING_PARSERS.names()


def test_unknown_reasoning_parser_lists_known_names() -> None:
    with pytest.raises(UnknownNameError, match=r"known: .*deepseek_r1.*qwen3"):
        get_reasoning_parser("o1")


CALL = '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            f"<think>\nI will search.\n</think>\n\n{CALL}",
            ParsedOutput(
                "",
                "I will search.",
                [ParsedToolCall("call_" + "0" * 24, "search", '{"q":"x"}')],
            ),
            id="reasoning-then-call",
        ),
        pytest.param(
            f"<think>maybe {CALL}?</think>No call needed.",
            ParsedOutput("No call needed.", f"maybe {CALL}?"),
            id="call-inside-reasoning-is-not-a-call",
        ),
        pytest.param(
            "<think>\n\n</think>\n\nHello",
            ParsedOutput("Hello", None),
            id="blank-reasoning-is-none",
        ),
        pytest.param(f"<think>cut off {CALL}", ParsedOutput("", f"cut off {CALL}"), id="unclosed"),
    ],
)
def test_reasoning_then_tools(text: str, expected: ParsedOutput) -> None:
    parsed = parse_output(
        text,
        tool_parser=get_tool_parser("hermes"),
        reasoning_parser=get_reasoning_parser("qwen3"),
        new_id=sequential_call_ids(),
    )
    assert parsed == expected


def test_output_parser_from_names_matches_parse_output() -> None:
    parser = build_output_parser("hermes", "deepseek_r1")
    parsed = parser.parse(f"think\n</think>\n{CALL}", new_id=sequential_call_ids())
    assert parsed.reasoning == "think"
    assert [(call.name, call.arguments) for call in parsed.tool_calls] == [("search", '{"q":"x"}')]


def test_starts_in_reasoning_without_reasoning_parser_is_rejected() -> None:
    with pytest.raises(ValueError, match="needs a reasoning parser"):
        build_output_parser("hermes", None, starts_in_reasoning=True)
