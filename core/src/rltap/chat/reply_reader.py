"""The text ids of one reply -> what a client is shown of it, streamed or whole.

One path for both: the text is decoded, cut at the first of the request's stop strings
(`rltap.chat.stop_strings`) and parsed into content, reasoning and tool calls
(`rltap.chat.streaming`). A reply that ran into the token limit without a stop string is
`truncated`: a tool call it left open is dropped rather than shown as text.

    reader = ReplyReader(renderer.stream_decoder(), parser.stream(), request.stop)
    for chunk in chunks:
        send(reader.push(chunk_text_ids))
    send(reader.finish(length=response.stop_reason is StopReason.LENGTH))
    reader.reply  # Reply(parsed, stop_sequence, truncated)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rltap.chat.stop_strings import StopStringCut, cut_at_stop
from rltap.chat.stream_decoder import StreamDecoder
from rltap.chat.streaming import OutputParser, StreamingParser
from rltap.record.parsed import Delta, IdFactory, ParsedOutput, fold_deltas

__all__ = ["Reply", "ReplyReader", "read_reply"]


@dataclass(frozen=True, slots=True)
class Reply:
    """A finished reply as the client is shown it."""

    parsed: ParsedOutput
    # The request's stop string that ended the reply (its text stops before it), or None.
    stop_sequence: str | None = None
    # The token limit ended the reply (a stop string completed by the last token the limit
    # allowed still ended it: not truncated).
    truncated: bool = False


class ReplyReader:
    """One streamed reply: ids in, the deltas they release out (see the module docstring)."""

    __slots__ = ("_cut", "_decoder", "_deltas", "_parser", "_truncated")

    def __init__(
        self, decoder: StreamDecoder, parser: StreamingParser, stop: Sequence[str]
    ) -> None:
        self._decoder = decoder
        self._parser = parser
        self._cut = StopStringCut(stop)
        self._deltas: list[Delta] = []
        self._truncated = False

    def push(self, text_ids: Sequence[int]) -> list[Delta]:
        """The deltas the next ids complete (none while text may still be a stop string or a
        tag)."""
        return self._kept(self._parser.feed(self._cut.push(self._decoder.push(text_ids))))

    def finish(self, *, length: bool) -> list[Delta]:
        """The rest, at the end of the reply; `length`: the engine stopped at the token limit."""
        text = self._cut.push(self._decoder.flush()) + self._cut.flush()
        deltas = self._parser.feed(text) if text else []
        self._truncated = length and self._cut.matched is None
        return self._kept(deltas + self._parser.finish(truncated=self._truncated))

    @property
    def reply(self) -> Reply:
        """Everything released so far, as one reply (whole once `finish` has run)."""
        return Reply(fold_deltas(self._deltas), self._cut.matched, self._truncated)

    def _kept(self, deltas: list[Delta]) -> list[Delta]:
        self._deltas.extend(deltas)
        return deltas


def read_reply(
    parser: OutputParser,
    text: str,
    stop: Sequence[str],
    *,
    length: bool,
    new_id: IdFactory | None = None,
) -> Reply:
    """A whole reply's text as the client is shown it (`length` as in `ReplyReader.finish`)."""
    kept, matched = cut_at_stop(text, stop)
    truncated = length and matched is None
    return Reply(parser.parse(kept, new_id=new_id, truncated=truncated), matched, truncated)
