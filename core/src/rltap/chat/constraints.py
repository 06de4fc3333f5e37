"""The grammar a request's reply must match: structured outputs and enforced tool choices.

`request_constraint(request, parser, renderer)` turns a canonical request's `response_format`,
`tools`, `tool_choice` and `parallel_tool_calls` into a `Constraint` (a Lark grammar in
llguidance's dialect, of the whole reply text) or None, and checks that llguidance compiles it
against the session's tokenizer, before any engine is called.

What each request asks for (calls are written in the configured tool parser's syntax,
`ToolParser.call_grammar`; a call's name is one of the allowed tools' and its arguments match
that tool's `parameters` schema):

- `response_format` json_schema (strict or not) / json_object: the reply is one JSON value of
  the schema (any object for json_object);
- `tool_choice` "required": one or more calls (exactly one when `parallel_tool_calls` is false);
  a named tool: calls of that tool only; neither lets text come first, so even a weak model
  reaches the call;
- "auto" (or unset) with tools and a response format: calls (one, if `parallel_tool_calls` is
  false), or the JSON value (the grammar is tool call | schema, DESIGN.md); with tools,
  `parallel_tool_calls` false and no format: a text reply, or at most one call (after text where
  the format allows it); with tools alone: no grammar;
- "none": no call: text in which the format's opening tag never occurs (hermes `<tool_call>`,
  mistral `[TOOL_CALLS]`; llama3: text that does not start with `{` and holds no
  `<|python_tag|>`), or the JSON value when a response format is given.

Rules every grammar follows:

- No free whitespace, since whitespace allowed anywhere lets a weak model pad forever: a response
  format's JSON is compact (`{"a":1,"b":[2]}`, as OpenAI's structured outputs are); a tool call,
  its arguments included, is written as chat templates render calls (`tojson`, json.dumps'
  separators: `{"name": "add", "arguments": {"a": 1, "b": 2}}`), the form the model was trained
  on.
- The end of the reply is not in the grammar: the engine allows the end-of-turn token exactly
  where the grammar is complete, and forces it when nothing else can follow.
- A reasoning model (a reasoning parser configured, `enable_thinking` not false) may think
  first: `<think>` free text `</think>`, up to two newlines, then the constrained part. When the
  template opens `<think>` itself (`starts_in_reasoning`), the reply starts in the reasoning and
  must close it. The reasoning is not constrained.

A schema llguidance cannot compile is a 400 naming the request field: the protocols check the
schemas they received (`check_request_schemas`, their own field names) and the session checks
the whole grammar. Checks are cached by their text (cachetools' LRU caches), so a repeated schema
costs one lookup.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import llguidance
import orjson
from cachetools import LRUCache, cached, cachedmethod

from rltap.chat.grammar_tokenizer import llguidance_tokenizer
from rltap.chat.lark_syntax import TokenSyntax, literal, text_without
from rltap.chat.streaming import OutputParser
from rltap.chat.tool_call_stream import ToolParser
from rltap.record.errors import InvalidRequest
from rltap.record.types import Constraint

if TYPE_CHECKING:
    from rltap.chat.renderer import ChatRenderer
    from rltap.record.generation import CanonicalRequest

__all__ = [
    "CALL_JSON",
    "COMPACT_JSON",
    "GrammarChecker",
    "build_constraint",
    "check_json_schema",
    "check_request_schemas",
    "constrained_tools",
    "grammar_checker",
    "request_constraint",
]

COMPACT_JSON = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
"""llguidance's JSON options (a schema's `x-guidance`) for a response format: compact JSON."""
CALL_JSON = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""llguidance's JSON options for a call's arguments: json.dumps' separators, no other space."""

_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True, slots=True)
class _Calls:
    """How tool calls may appear in the reply."""

    mode: Literal["forbid", "optional", "required"]
    tools: tuple[int, ...]  # indices into request.tools of the tools a call may name
    parallel: bool
    reason: str


def _calls(request: CanonicalRequest) -> _Calls | None:
    choice, tools = request.tool_choice, request.tools or []
    every = tuple(range(len(tools)))
    if choice == "none":
        return _Calls("forbid", (), False, "tool_choice 'none'")
    if isinstance(choice, dict):
        named = tuple(i for i in every if tools[i]["function"]["name"] == choice["name"])
        reason = f"tool_choice function {choice['name']!r}"
        return _Calls("required", named, request.parallel_tool_calls, reason)
    if choice == "required":
        return _Calls("required", every, request.parallel_tool_calls, "tool_choice 'required'")
    if not tools:
        return None
    if not request.parallel_tool_calls:
        return _Calls("optional", every, False, "parallel_tool_calls false")
    if request.response_format is not None:
        return _Calls("optional", every, True, "tool_choice 'auto'")
    return None


def constrained_tools(request: CanonicalRequest) -> tuple[int, ...]:
    """The indices of the tools whose `parameters` schemas the request's grammar holds."""
    calls = _calls(request)
    return calls.tools if calls is not None else ()


def _compact(schema: dict[str, Any], style: dict[str, Any] = COMPACT_JSON) -> dict[str, Any]:
    return {**schema, "x-guidance": style}


def _json_rule(schema: dict[str, Any], style: dict[str, Any] = COMPACT_JSON) -> str:
    return f"%json {orjson.dumps(_compact(schema, style)).decode()}"


def _tool_schema(tool: dict[str, Any]) -> dict[str, Any]:
    parameters: dict[str, Any] | None = tool["function"].get("parameters")
    return parameters or _ANY_OBJECT


def _response_schema(response_format: dict[str, Any]) -> dict[str, Any]:
    if response_format["type"] == "json_object":
        return _ANY_OBJECT
    schema: dict[str, Any] = response_format["schema"]
    return schema


_SOURCE_LINE = re.compile(r"^\s*\d+ \|")
_POSITION = re.compile(r"^at \d+\(\d+\): ")


def _reason(error: str) -> str:
    """llguidance's message without the grammar excerpt it quotes."""
    lines: list[str] = []
    for line in error.strip().splitlines():
        if _SOURCE_LINE.match(line):
            break
        if line.strip() and set(line.strip()) != {"^"}:
            lines.append(line.strip())
    return _POSITION.sub("", " ".join(lines))


def _validate(grammar: str, tokenizer: llguidance.LLTokenizer | None) -> str:
    """llguidance's error for `grammar` ("" when it compiles)."""
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tokenizer)
    return _reason(messages[0]) if is_error and messages else ""


@cached(LRUCache(maxsize=1024), lock=threading.Lock())
def _schema_error(grammar: str) -> str:
    return _validate(grammar, None)


def check_json_schema(schema: dict[str, Any], param: str) -> None:
    """`InvalidRequest` naming `param` when llguidance cannot compile `schema`."""
    error = _schema_error(f"start: {_json_rule(schema)}")
    if error:
        msg = f"Invalid schema for '{param}': {error}"
        raise InvalidRequest(msg, param=param)


def check_request_schemas(
    request: CanonicalRequest, *, schema_param: str, tool_param: Callable[[int], str]
) -> None:
    """Check every schema the request's grammar will hold, naming the API's own fields:
    `schema_param` for the response format's, `tool_param(i)` for tool i's parameters."""
    response_format = request.response_format
    if response_format is not None and response_format["type"] == "json_schema":
        check_json_schema(response_format["schema"], schema_param)
    tools = request.tools or []
    for i in constrained_tools(request):
        check_json_schema(_tool_schema(tools[i]), tool_param(i))


def _call_rules(
    request: CanonicalRequest, calls: _Calls, tool_parser: ToolParser | None, tokens: TokenSyntax
) -> list[str]:
    """The rule `calls` (the reply's calls) and the rules it uses; `InvalidRequest` when there
    is nothing to call or the tool parser has no grammar."""
    tools = request.tools or []
    if not calls.tools:
        msg = f"{calls.reason} needs a tool in 'tools'."
        raise InvalidRequest(msg, param="tool_choice")
    if tool_parser is None:
        msg = f"{calls.reason} needs a tool parser; this server has none (--tool-parser)."
        raise InvalidRequest(msg, param="tool_choice")
    rules: list[str] = []
    for n, i in enumerate(calls.tools):
        call = tool_parser.call_grammar(tools[i]["function"]["name"], f"args_{n}", tokens)
        if call is None:
            msg = f"{calls.reason}: the tool parser {tool_parser.name!r} has no call grammar."
            raise InvalidRequest(msg, param="tool_choice")
        rules += [f"call_{n}: {call}", f"args_{n}: {_json_rule(_tool_schema(tools[i]), CALL_JSON)}"]
    rules.append("call: " + " | ".join(f"call_{n}" for n in range(len(calls.tools))))
    rules.append(
        f"calls: {tool_parser.calls_grammar('call', parallel=calls.parallel, tokens=tokens)}"
    )
    return rules


def _body(
    request: CanonicalRequest,
    calls: _Calls | None,
    tool_parser: ToolParser | None,
    tokens: TokenSyntax,
) -> tuple[str, list[str]]:
    """The Lark expression of the reply after any reasoning, and the rules it uses (`calls` is
    None unless there is a tool parser or they are required)."""
    rules: list[str] = []
    alternatives: list[str] = []
    if calls is not None and calls.mode != "forbid":
        rules += _call_rules(request, calls, tool_parser, tokens)
        alternatives.append("calls")
    required = calls is not None and calls.mode == "required"
    if request.response_format is not None and not required:
        rules.append(f"json: {_json_rule(_response_schema(request.response_format))}")
        alternatives.append("json")
    elif calls is not None and tool_parser is not None and not required:
        # Free text, in which no call can start.
        rules.append(f"TEXT: {tool_parser.no_call_text(tokens)}")
        after_text = ["TEXT calls"] if alternatives and tool_parser.text_before_calls else []
        alternatives = ["TEXT", *(after_text or alternatives)]
    return " | ".join(alternatives), rules


def _thinking_prefix(
    request: CanonicalRequest, parser: OutputParser, tokens: TokenSyntax
) -> tuple[str, list[str]]:
    """The reasoning block a reply may (or, opened by the template, must) begin with, and the
    rules it uses."""
    reasoning = parser.reasoning_parser
    if reasoning is None or request.template_kwargs.get("enable_thinking") is False:
        return "", []
    close = reasoning.close_tag
    # Up to two newlines after the block (Qwen3 writes `</think>` and a blank line), no more.
    newlines = f"({literal(chr(10))} | {literal(2 * chr(10))})?"
    rules = [f"THOUGHT: {text_without((close,))}"]
    thought = f"THOUGHT {tokens.tag(close)} {newlines}"
    starts_inside = parser.starts_in_reasoning
    if starts_inside is None:
        starts_inside = reasoning.starts_in_reasoning
    if starts_inside:
        return f"{thought} ", rules
    return f"({tokens.tag(reasoning.open_tag)} {thought})? ", rules


def _reasons(request: CanonicalRequest, calls: _Calls | None) -> str:
    reasons: list[str] = []
    response_format = request.response_format
    if response_format is not None:
        name = response_format.get("name")
        reasons.append(
            f"response_format {response_format['type']}" + (f" {name!r}" if name else "")
        )
    if calls is not None:
        reasons.append(calls.reason)
    return " and ".join(reasons)


def build_constraint(
    request: CanonicalRequest, parser: OutputParser, tokens: TokenSyntax
) -> Constraint | None:
    """The grammar `request` asks for (see the module docstring), or None for a free reply.

    Raises `InvalidRequest` for a tool choice that cannot be honoured (no tool parser, or one
    without a call grammar).
    """
    calls = _calls(request)
    tool_parser = parser.tool_parser
    if tool_parser is None and calls is not None and calls.mode != "required":
        calls = None  # no parser: nothing in the reply is ever a call
    if calls is None and request.response_format is None:
        return None
    body, rules = _body(request, calls, tool_parser, tokens)
    prefix, prefix_rules = _thinking_prefix(request, parser, tokens)
    start = f"start: {prefix}({body})" if prefix else f"start: {body}"
    grammar = "\n".join([start, *prefix_rules, *rules])
    schema = None
    if body == "json" and not prefix and request.response_format is not None:
        schema = _compact(_response_schema(request.response_format))
    return Constraint(grammar=grammar, reason=_reasons(request, calls), json_schema=schema)


class GrammarChecker:
    """Checks grammars against one tokenizer with llguidance; results cached by grammar text.

    llguidance's tokenizer is built on the first check (a walk over the vocabulary: about two
    seconds for Qwen's 151k tokens), once per process and tokenizer, shared with the engines
    (`rltap.chat.grammar_tokenizer`).
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.tokens = TokenSyntax(tokenizer.get_added_vocab())
        self._slow = False  # llguidance reads fast tokenizers only
        self._errors: LRUCache[str, str] = LRUCache(maxsize=1024)
        self._errors_lock = threading.Lock()

    def _llg_tokenizer(self) -> llguidance.LLTokenizer | None:
        if self._slow:
            return None
        try:
            return llguidance_tokenizer(self._tokenizer)
        except ValueError:
            # A slow tokenizer: the grammar is checked alone (its token ids come from the
            # tokenizer's own added vocabulary, so they exist).
            self._slow = True
            return None

    @cachedmethod(lambda self: self._errors, lock=lambda self: self._errors_lock)
    def _error(self, grammar: str) -> str:
        return _validate(grammar, self._llg_tokenizer())

    def check(self, constraint: Constraint, *, param: str) -> None:
        """`InvalidRequest` naming `param` with llguidance's reason if the grammar does not
        compile."""
        error = self._error(constraint.grammar)
        if error:
            msg = f"Cannot constrain the reply to {constraint.reason}: {error}"
            raise InvalidRequest(msg, param=param)


_checkers: weakref.WeakKeyDictionary[ChatRenderer, GrammarChecker] = weakref.WeakKeyDictionary()


def grammar_checker(renderer: ChatRenderer) -> GrammarChecker:
    """The one `GrammarChecker` of `renderer`'s tokenizer."""
    checker = _checkers.get(renderer)
    if checker is None:
        checker = _checkers.setdefault(renderer, GrammarChecker(renderer.tokenizer))
    return checker


def request_constraint(
    request: CanonicalRequest, parser: OutputParser, renderer: ChatRenderer
) -> Constraint | None:
    """The checked grammar of `request` for a session with `parser` and `renderer` (None: the
    reply is free); `InvalidRequest` (400) when it cannot be built or compiled."""
    checker = grammar_checker(renderer)
    constraint = build_constraint(request, parser, checker.tokens)
    if constraint is not None:
        param = "response_format" if request.response_format is not None else "tool_choice"
        checker.check(constraint, param=param)
    return constraint
