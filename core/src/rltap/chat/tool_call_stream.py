"""Incremental tool-call parsing shared by every format of `rltap.chat.tool_parsers`.

Rules shared by every format:

- Each parser is one incremental machine (`ToolCallStream`); `ToolParser.parse` runs it over the
  whole text, so streaming and whole-text parsing cannot drift apart.
- Markup is committed only once a call parses. Invalid JSON, a missing name, non-object arguments
  or a block still open at the end of the text leave the markup and its body as content,
  verbatim; parsing never raises on model output. The one exception: in a reply cut short by the
  token limit (`truncated`), a call the model had begun (its opening tag read, or llama3's bare
  JSON at the start) is dropped, not shown: it is a call the model did not finish, never text
  a client should print as the answer.
- Arguments are re-serialised as compact JSON (`{"a":1}`), non-ASCII kept; NaN and Infinity are
  rejected because they are not JSON. Arguments given as a JSON string are decoded first.
- A call is emitted when its block is complete (one start delta, then one arguments delta), never
  piecemeal: a block that turns out invalid must fall back to content, and a call already
  announced to a client cannot be taken back.
- Content is the text outside the calls, verbatim, less the whitespace that belongs to a
  call's markup: the content's leading whitespace when a call comes before its first visible
  character, and its trailing whitespace when a call comes after its last one
  (`TextAroundMarkup`). `Sure!\n<tool_call>...</tool_call>` is `Sure!`, as the chat templates
  write the `\n` themselves between the text and the call; whitespace between two pieces of
  text stays, and a reply without a call is returned exactly as decoded.
"""

from __future__ import annotations

import enum
import json
from abc import ABC, abstractmethod
from typing import ClassVar

from rltap.chat.lark_syntax import TokenSyntax, literal, text_without
from rltap.record.parsed import (
    ContentDelta,
    Delta,
    IdFactory,
    ParsedOutput,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
    fold_deltas,
    random_call_id,
)

__all__ = [
    "JsonExtent",
    "StreamState",
    "TextAroundMarkup",
    "ToolCallStream",
    "ToolParser",
    "call_fields",
    "loads_json",
    "partial_tag_len",
]


def partial_tag_len(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that is a proper prefix of one of `tags`.

    That much text must be held back: the next piece may complete the tag.
    """
    longest = max((len(tag) for tag in tags), default=0)
    for size in range(min(len(text), longest - 1), 0, -1):
        tail = text[-size:]
        if any(tag.startswith(tail) for tag in tags if len(tag) > size):
            return size
    return 0


class TextAroundMarkup:
    """The text of one part of a reply (its content, or its reasoning) as it arrives between
    markup, released as it comes, less the whitespace that touches the markup.

    Dropped: the text's leading whitespace when markup comes before its first visible character,
    its trailing whitespace when markup comes after its last one. Kept: whitespace between two
    visible characters (even with markup between them) and at the edges of the output. Whitespace
    is held back until the next visible text tells which it is.

    Usage:
        edges = TextAroundMarkup()
        edges.text("Sure! ")  # "Sure!"
        edges.markup()        # a tool call
        edges.end()           # "": the trailing " " touched the call
    """

    __slots__ = ("_after_markup", "_blank", "_shown")

    def __init__(self, *, after_markup: bool = False) -> None:
        self._blank = ""  # whitespace held back
        self._shown = False  # whether visible text was released
        self._after_markup = after_markup  # markup since the last visible text

    def text(self, text: str) -> str:
        """The next text; returns what may be released now."""
        held = self._blank + text
        body = held.rstrip()
        if not body:
            self._blank = held
            return ""
        self._blank = held[len(body) :]
        if not self._shown and self._after_markup:
            body = body.lstrip()
        self._shown = True
        self._after_markup = False
        return body

    def markup(self) -> None:
        """Markup came: whitespace before it at the start of the text is dropped now; between
        visible text it waits for the next visible text."""
        if not self._shown:
            self._blank = ""
        self._after_markup = True

    def end(self) -> str:
        """The text ended: the whitespace still held, unless markup came after the last visible
        text."""
        blank, self._blank = self._blank, ""
        return "" if self._after_markup else blank


def _reject_constant(name: str) -> object:
    msg = f"{name} is not JSON"
    raise ValueError(msg)


def loads_json(text: str) -> object | None:
    """Decoded JSON, or None when `text` is not JSON (None as a JSON value is not needed here)."""
    try:
        value: object = json.loads(text, parse_constant=_reject_constant)
    except ValueError:  # json.JSONDecodeError is a ValueError; so is _reject_constant's error
        return None
    return value


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def call_fields(obj: object, argument_keys: tuple[str, ...]) -> tuple[str, str] | None:
    """(name, compact JSON arguments) of a decoded call object, or None when it is not a call."""
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    arguments: object = None
    for key in argument_keys:
        if key in obj:
            arguments = obj[key]
            break
    if isinstance(arguments, str):
        arguments = loads_json(arguments)
        if arguments is None:
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    return name, _dumps(arguments)


class JsonExtent:
    """Finds where a JSON object or array that starts at index 0 ends, fed a growing string.

    Tracks only nesting and strings; whether the text is valid JSON is decided by decoding it.
    """

    __slots__ = ("depth", "escaped", "in_string", "position")

    def __init__(self) -> None:
        self.position = 0
        self.depth = 0
        self.in_string = False
        self.escaped = False

    def end(self, text: str) -> int | None:
        """Index just past the closing bracket, or None while it has not arrived."""
        for index in range(self.position, len(text)):
            char = text[index]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.position = index + 1
                    return index + 1
        self.position = len(text)
        return None


class StreamState(enum.Enum):
    START = enum.auto()  # llama3: before the first non-blank character
    TEXT = enum.auto()  # plain content, looking for a tag
    BLOCK = enum.auto()  # hermes: inside <tool_call>, looking for </tool_call>
    HEAD = enum.auto()  # mistral: after [TOOL_CALLS]
    NAME = enum.auto()  # mistral: reading name, expecting [ARGS]
    ARGS = enum.auto()  # mistral: after [ARGS]; llama3: expecting a call object
    JSON = enum.auto()  # reading a JSON value up to its closing bracket
    AFTER = enum.auto()  # llama3: after a call, expecting ';'


class ToolCallStream(ABC):
    """Incremental tool-call parser for one reply: `feed` pieces, then `finish` once.

    Yields `ContentDelta` (the text outside calls, less the whitespace touching them: see the
    module docstring), `ToolCallStartDelta` and `ToolCallArgumentsDelta`. Text that may still
    turn out to be markup is held back, and so is whitespace until the next visible text; `finish`
    releases whatever is held as content.
    """

    def __init__(self, *, new_id: IdFactory | None = None) -> None:
        self._new_id = new_id or random_call_id
        self._state = StreamState.TEXT
        self._buf = ""  # received, not yet decided
        self._pending = ""  # consumed markup that becomes content if no call follows
        self._deltas: list[Delta] = []
        self._calls = 0
        self._json = JsonExtent()
        self._edges = TextAroundMarkup()
        self._finished = False

    def feed(self, text: str) -> list[Delta]:
        """Consume the next piece of output; returns the deltas it completes."""
        if self._finished:
            msg = "feed() after finish()"
            raise RuntimeError(msg)
        self._buf += text
        while self._step():
            pass
        return self._take()

    def finish(self, *, truncated: bool = False) -> list[Delta]:
        """End of output: anything held back (a partial tag, an open block) becomes content, but
        for a call left open in a `truncated` reply (see the module docstring)."""
        if self._finished:
            return []
        self._finished = True
        if truncated and self._state not in (StreamState.TEXT, StreamState.START):
            self._edges.markup()  # the call left open is dropped, with the whitespace before it
        else:
            self._content(self._pending + self._buf)
        self._pending = self._buf = ""
        rest = self._edges.end()
        if rest:
            self._deltas.append(ContentDelta(rest))
        return self._take()

    @abstractmethod
    def _step(self) -> bool:
        """Advance on the buffer; True when progress was made and stepping should continue."""

    def _take(self) -> list[Delta]:
        deltas, self._deltas = self._deltas, []
        return deltas

    def _content(self, text: str) -> None:
        released = self._edges.text(text)
        if released:
            self._deltas.append(ContentDelta(released))

    def _emit_call(self, name: str, arguments: str) -> None:
        self._edges.markup()
        index = self._calls
        self._calls += 1
        self._deltas.append(ToolCallStartDelta(index=index, id=self._new_id(), name=name))
        self._deltas.append(ToolCallArgumentsDelta(index=index, fragment=arguments))

    def _fail(self) -> bool:
        """The markup read so far is not a call: it is content; look for the next tag."""
        self._content(self._pending)
        self._pending = ""
        self._state = StreamState.TEXT
        return True

    def _text_until(self, tags: tuple[str, ...]) -> str | None:
        """In plain text: emit content up to the first tag and consume it, or hold a partial tag."""
        found: str | None = None
        at = -1
        for tag in tags:
            index = self._buf.find(tag)
            if index >= 0 and (at < 0 or index < at):
                found, at = tag, index
        if found is None:
            cut = len(self._buf) - partial_tag_len(self._buf, tags)
            self._content(self._buf[:cut])
            self._buf = self._buf[cut:]
            return None
        self._content(self._buf[:at])
        self._buf = self._buf[at + len(found) :]
        self._pending = found
        return found

    def _skip_blank(self) -> str | None:
        """Move leading whitespace into the pending markup; the next character, if any."""
        rest = self._buf.lstrip()
        self._pending += self._buf[: len(self._buf) - len(rest)]
        self._buf = rest
        return rest[0] if rest else None

    def _start_json(self) -> bool:
        self._json = JsonExtent()
        self._state = StreamState.JSON
        return True

    def _take_json(self) -> str | None:
        """The complete JSON text at the front of the buffer (consumed), or None until it is."""
        end = self._json.end(self._buf)
        if end is None:
            return None
        text, self._buf = self._buf[:end], self._buf[end:]
        return text


class ToolParser(ABC):
    """A tool-call format. Stateless: `stream()` makes the per-reply machine."""

    name: ClassVar[str]
    # A reply that contains none of these tags holds no call: all of it is content. Empty for a
    # format whose calls need no tag (llama3's bare JSON), which is always parsed.
    opening_tags: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def stream(self, *, new_id: IdFactory | None = None) -> ToolCallStream:
        """A fresh incremental parser for one reply."""

    # The grammar of this format's calls (`rltap.chat.constraints` builds a request's grammar of
    # them): written as the model writes them, with no free whitespace (JSON in json.dumps'
    # style, as chat templates render calls).
    call_separator: ClassVar[str] = ""
    # Whether a call may follow text in the same reply (False: calls are the whole content).
    text_before_calls: ClassVar[bool] = True

    def call_grammar(self, name: str, arguments: str, tokens: TokenSyntax) -> str | None:
        """Lark for one call of the tool `name` whose arguments match the rule `arguments`; None
        for a format without a grammar (a forced tool choice is then refused)."""
        return None

    def calls_grammar(self, call: str, *, parallel: bool, tokens: TokenSyntax) -> str:
        """Lark for the calls of one reply: one `call` (a rule), or one or more if `parallel`."""
        if not parallel:
            return call
        if not self.call_separator:
            return f"{call}+"
        return f"{call} ({literal(self.call_separator)} {call})*"

    def no_call_text(self, tokens: TokenSyntax) -> str:
        """A Lark terminal for text that holds no call: no opening tag occurs in it."""
        return text_without(self.opening_tags)

    def parse(
        self, text: str, *, new_id: IdFactory | None = None, truncated: bool = False
    ) -> ParsedOutput:
        """Parse a whole reply (no reasoning handling): the content (see the module docstring)
        and the tool calls; `truncated`: the reply was cut short by the token limit."""
        if self.opening_tags and not any(tag in text for tag in self.opening_tags):
            return ParsedOutput(content=text)  # most replies: no need to run the parser
        stream = self.stream(new_id=new_id)
        return fold_deltas([*stream.feed(text), *stream.finish(truncated=truncated)])
