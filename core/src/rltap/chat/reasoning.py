"""Reasoning parsers: split a `<think>...</think>` block off model output (`--reasoning-parser`).

Rules:

- Only a block at the start of the output counts (leading whitespace allowed): reasoning models
  think first, and a `<think>` later in the content (a quote, a tool argument) stays text.
- `starts_in_reasoning`: the chat template already opened `<think>` in the prompt (DeepSeek-R1,
  Qwen3 thinking-2507), so the output is reasoning up to the first `</think>`. A `<think>` the
  model repeats at the very start is dropped all the same.
- A block that never closes is reasoning to the end of the output (a reply cut by `max_tokens`
  while thinking has no content).
- Everything after `</think>` is content, to be read by the tool parser; a tool call inside the
  reasoning is never a call.
- Text is split verbatim but for the whitespace that touches a tag, which is part of the markup
  (chat templates write `<think>\n` + reasoning + `\n</think>\n\n` + content themselves):
  whitespace before `<think>`, at the start and end of the reasoning, and at the start of the
  content after `</think>`. The reasoning of a block cut off before `</think>` keeps its
  trailing whitespace, and content without a block before it keeps its leading whitespace.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from rltap.chat.registry import Registry
from rltap.chat.tool_call_stream import TextAroundMarkup, partial_tag_len
from rltap.record.parsed import ContentDelta, ReasoningDelta

__all__ = [
    "REASONING_PARSERS",
    "DeepSeekR1ReasoningParser",
    "Qwen3ReasoningParser",
    "ReasoningParser",
    "ReasoningSplit",
    "ReasoningStream",
    "get_reasoning_parser",
]


@dataclass(frozen=True, slots=True)
class ReasoningSplit:
    """The reasoning (None when there is no reasoning text) and the content after it, less the
    whitespace touching the tags (see the module docstring)."""

    reasoning: str | None
    content: str


class _State(enum.Enum):
    START = enum.auto()  # before the first non-blank character: may be the opening tag
    REASONING = enum.auto()
    CONTENT = enum.auto()


class ReasoningStream:
    """Incremental reasoning splitter for one reply: `feed` pieces, then `finish` once.

    Yields `ReasoningDelta` and `ContentDelta` values (verbatim but for the whitespace touching a
    tag). Held back: leading whitespace and a possible opening tag at the start, a possible partial
    closing tag and trailing whitespace inside the reasoning, and whitespace right after the
    closing tag.
    """

    def __init__(self, *, open_tag: str, close_tag: str, starts_in_reasoning: bool) -> None:
        self._open = open_tag
        self._close = close_tag
        self._starts_in_reasoning = starts_in_reasoning
        self._state = _State.START
        self._buf = ""
        self._thought = TextAroundMarkup(after_markup=True)  # it starts after `<think>`
        self._after_close = False  # content not yet begun right after `</think>`
        self._deltas: list[ContentDelta | ReasoningDelta] = []
        self._finished = False

    def feed(self, text: str) -> list[ContentDelta | ReasoningDelta]:
        """Consume the next piece of output; returns the deltas it completes."""
        if self._finished:
            msg = "feed() after finish()"
            raise RuntimeError(msg)
        self._buf += text
        while self._step(at_end=False):
            pass
        return self._take()

    def finish(self) -> list[ContentDelta | ReasoningDelta]:
        """End of output: a held partial tag is text of the part it is in."""
        if self._finished:
            return []
        self._finished = True
        while self._step(at_end=True):
            pass
        if self._state is _State.REASONING:
            self._reasoning(self._thought.end())
        return self._take()

    def _take(self) -> list[ContentDelta | ReasoningDelta]:
        deltas, self._deltas = self._deltas, []
        return deltas

    def _step(self, *, at_end: bool) -> bool:
        if self._state is _State.START:
            rest = self._buf.lstrip()
            if rest.startswith(self._open):
                self._buf = rest[len(self._open) :]
                self._state = _State.REASONING
            elif self._open.startswith(rest) and not at_end:
                return False
            else:
                self._state = _State.REASONING if self._starts_in_reasoning else _State.CONTENT
            return True
        if self._state is _State.CONTENT:
            text, self._buf = self._buf, ""
            if self._after_close:
                text = text.lstrip()
                self._after_close = not text
            if text:
                self._deltas.append(ContentDelta(text))
            return False
        return self._step_reasoning(at_end=at_end)

    def _step_reasoning(self, *, at_end: bool) -> bool:
        close = self._buf.find(self._close)
        if close >= 0:
            text, self._buf = self._buf[:close], self._buf[close + len(self._close) :]
        else:
            held = 0 if at_end else partial_tag_len(self._buf, (self._close,))
            cut = len(self._buf) - held
            text, self._buf = self._buf[:cut], self._buf[cut:]
        self._reasoning(self._thought.text(text))
        if close >= 0:
            self._thought.markup()
            self._thought.end()  # the whitespace before `</think>` is the tag's
            self._state = _State.CONTENT
            self._after_close = True
        return close >= 0

    def _reasoning(self, text: str) -> None:
        if text:
            self._deltas.append(ReasoningDelta(text))


class ReasoningParser:
    """A reasoning format: the block's tags and whether output starts inside it by default."""

    name: ClassVar[str]
    open_tag: ClassVar[str] = "<think>"
    close_tag: ClassVar[str] = "</think>"
    starts_in_reasoning: ClassVar[bool] = False

    def stream(self, *, starts_in_reasoning: bool | None = None) -> ReasoningStream:
        """A fresh incremental splitter; `starts_in_reasoning=None` keeps the parser's default."""
        if starts_in_reasoning is None:
            starts_in_reasoning = self.starts_in_reasoning
        return ReasoningStream(
            open_tag=self.open_tag,
            close_tag=self.close_tag,
            starts_in_reasoning=starts_in_reasoning,
        )

    def split(self, text: str, *, starts_in_reasoning: bool | None = None) -> ReasoningSplit:
        """Split a whole reply into reasoning and content (see `ReasoningSplit`)."""
        stream = self.stream(starts_in_reasoning=starts_in_reasoning)
        reasoning: list[str] = []
        content: list[str] = []
        for delta in [*stream.feed(text), *stream.finish()]:
            if isinstance(delta, ReasoningDelta):
                reasoning.append(delta.text)
            else:
                content.append(delta.text)
        return ReasoningSplit(
            reasoning="".join(reasoning) if reasoning else None,
            content="".join(content),
        )


REASONING_PARSERS: Registry[type[ReasoningParser]] = Registry("reasoning parser")
"""Every reasoning parser by name; `get_reasoning_parser` instantiates one."""


def get_reasoning_parser(name: str) -> ReasoningParser:
    """The reasoning parser registered as `name` (raises `UnknownNameError` listing known names)."""
    return REASONING_PARSERS.get(name)()


@REASONING_PARSERS.register("qwen3", "think")
class Qwen3ReasoningParser(ReasoningParser):
    """`<think>...</think>` that the model opens itself (Qwen3, QwQ with the stock template)."""

    name = "qwen3"


@REASONING_PARSERS.register("deepseek_r1", "deepseek-r1")
class DeepSeekR1ReasoningParser(ReasoningParser):
    """`<think>...</think>` already opened by the template: output starts inside the reasoning."""

    name = "deepseek_r1"
    starts_in_reasoning = True
