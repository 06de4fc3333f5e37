"""The output parser of a session: reasoning first, then tool calls, whole or streamed.

A session picks its parsers by name (`--tool-parser hermes --reasoning-parser qwen3`) once:

    parser = build_output_parser("hermes", "qwen3", starts_in_reasoning=False)
    parser.parse(text)                  # -> ParsedOutput, for a non-streamed reply
    stream = parser.stream()            # per streamed reply
    for piece in pieces:
        send(stream.feed(piece))        # -> list[Delta]
    send(stream.finish())

Streaming and whole-text parsing give the same `ParsedOutput` for every way of cutting the text
into pieces (`fold_deltas(all deltas) == parser.parse(text)`), so the reply a client assembles from
the stream is the reply rltap records.

Hold-back (what `feed` does not release yet):

- a possible partial tag (`<thi`, `</think`, `<tool_`, `[TOOL_C`, `<|python`) until the next piece
  tells whether it is one;
- a whole tool-call block until it is complete, so that invalid JSON can still fall back to content
  and a call is never announced and then retracted (see `rltap.chat.tool_parsers`);
- whitespace, until the next visible text tells whether it touches markup.

What the client is shown is the decoded text less the markup the parsers turn into fields: the
`<think>` block, the tool-call blocks, and the whitespace touching them (whitespace before
`<think>`, around the reasoning, after `</think>`, and at the edges of the content next to a
call: see `rltap.chat.reasoning` and `rltap.chat.tool_call_stream`). All other text is kept as
decoded: a plain reply `"  line one\n"` is `"  line one\n"`.

Flush (`finish`): a partial tag or an unclosed tool-call block becomes content, verbatim (but
a call left open by a reply cut at the token limit, `truncated`, is dropped: see
`rltap.chat.tool_call_stream`); an unclosed reasoning block stays reasoning; held whitespace
that touches no markup is released.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rltap.chat.reasoning import ReasoningParser, ReasoningStream, get_reasoning_parser
from rltap.chat.tool_call_stream import ToolCallStream, ToolParser
from rltap.chat.tool_parsers import get_tool_parser
from rltap.record.parsed import (
    ContentDelta,
    Delta,
    IdFactory,
    ParsedOutput,
    ReasoningDelta,
)

__all__ = [
    "OutputParser",
    "StreamingParser",
    "build_output_parser",
    "build_streaming_parser",
    "parse_output",
]


class StreamingParser:
    """Turns the text of one reply, piece by piece, into content, reasoning and tool-call deltas.

    Usage:
        stream = StreamingParser(get_tool_parser("hermes"), get_reasoning_parser("qwen3"))
        deltas = [*stream.feed("<think>hm</think>Hi"), *stream.finish()]
        fold_deltas(deltas)  # ParsedOutput(content="Hi", reasoning="hm", tool_calls=[])
    """

    def __init__(
        self,
        tool_parser: ToolParser | None = None,
        reasoning_parser: ReasoningParser | None = None,
        *,
        starts_in_reasoning: bool | None = None,
        new_id: IdFactory | None = None,
    ) -> None:
        _check_flag(reasoning_parser, starts_in_reasoning)
        self._reasoning: ReasoningStream | None = (
            reasoning_parser.stream(starts_in_reasoning=starts_in_reasoning)
            if reasoning_parser is not None
            else None
        )
        self._tools: ToolCallStream | None = (
            tool_parser.stream(new_id=new_id) if tool_parser is not None else None
        )
        self._finished = False

    def feed(self, text: str) -> list[Delta]:
        """Consume the next piece of output text; returns the deltas it completes."""
        if self._finished:
            msg = "feed() after finish()"
            raise RuntimeError(msg)
        split = self._reasoning.feed(text) if self._reasoning else [ContentDelta(text)]
        return self._route(split)

    def finish(self, *, truncated: bool = False) -> list[Delta]:
        """End of output: flush what is held back (see the module docstring for the rules);
        `truncated`: the reply was cut short by the token limit."""
        if self._finished:
            return []
        self._finished = True
        deltas = self._route(self._reasoning.finish()) if self._reasoning else []
        if self._tools is not None:
            deltas.extend(self._tools.finish(truncated=truncated))
        return deltas

    def _route(self, split: Sequence[ContentDelta | ReasoningDelta]) -> list[Delta]:
        deltas: list[Delta] = []
        for piece in split:
            if isinstance(piece, ContentDelta) and self._tools is not None:
                deltas.extend(self._tools.feed(piece.text))
            else:
                deltas.append(piece)
        return deltas


def parse_output(
    text: str,
    *,
    tool_parser: ToolParser | None = None,
    reasoning_parser: ReasoningParser | None = None,
    starts_in_reasoning: bool | None = None,
    new_id: IdFactory | None = None,
    truncated: bool = False,
) -> ParsedOutput:
    """Parse a whole reply: split off reasoning, then find tool calls in the rest (`truncated`:
    the reply was cut short by the token limit)."""
    _check_flag(reasoning_parser, starts_in_reasoning)
    reasoning: str | None = None
    content = text
    if reasoning_parser is not None:
        split = reasoning_parser.split(text, starts_in_reasoning=starts_in_reasoning)
        reasoning, content = split.reasoning, split.content
    if tool_parser is None:
        return ParsedOutput(content=content, reasoning=reasoning)
    parsed = tool_parser.parse(content, new_id=new_id, truncated=truncated)
    return ParsedOutput(content=parsed.content, reasoning=reasoning, tool_calls=parsed.tool_calls)


@dataclass(frozen=True, slots=True)
class OutputParser:
    """The parsers one session uses for every reply; build it once with `build_output_parser`.

    `starts_in_reasoning=None` keeps the reasoning parser's own default.
    """

    tool_parser: ToolParser | None = None
    reasoning_parser: ReasoningParser | None = None
    starts_in_reasoning: bool | None = None

    def parse(
        self, text: str, *, new_id: IdFactory | None = None, truncated: bool = False
    ) -> ParsedOutput:
        """Parse a whole reply (`truncated`: cut short by the token limit)."""
        return parse_output(
            text,
            tool_parser=self.tool_parser,
            reasoning_parser=self.reasoning_parser,
            starts_in_reasoning=self.starts_in_reasoning,
            new_id=new_id,
            truncated=truncated,
        )

    def stream(self, *, new_id: IdFactory | None = None) -> StreamingParser:
        """A fresh streaming parser for one reply."""
        return StreamingParser(
            self.tool_parser,
            self.reasoning_parser,
            starts_in_reasoning=self.starts_in_reasoning,
            new_id=new_id,
        )


def build_output_parser(
    tool_parser: str | None,
    reasoning_parser: str | None = None,
    starts_in_reasoning: bool | None = None,
) -> OutputParser:
    """An `OutputParser` from registered names (None: no parser of that kind).

    Raises `UnknownNameError` for an unknown name and ValueError for `starts_in_reasoning=True`
    without a reasoning parser.
    """
    tools = get_tool_parser(tool_parser) if tool_parser is not None else None
    thoughts = get_reasoning_parser(reasoning_parser) if reasoning_parser is not None else None
    _check_flag(thoughts, starts_in_reasoning)
    return OutputParser(tools, thoughts, starts_in_reasoning)


def build_streaming_parser(
    tool_parser: str | None,
    reasoning_parser: str | None = None,
    starts_in_reasoning: bool | None = None,
    *,
    new_id: IdFactory | None = None,
) -> StreamingParser:
    """A `StreamingParser` for one reply from registered parser names."""
    return build_output_parser(tool_parser, reasoning_parser, starts_in_reasoning).stream(
        new_id=new_id
    )


def _check_flag(reasoning_parser: ReasoningParser | None, starts_in_reasoning: bool | None) -> None:
    if starts_in_reasoning and reasoning_parser is None:
        msg = "starts_in_reasoning=True needs a reasoning parser"
        raise ValueError(msg)
