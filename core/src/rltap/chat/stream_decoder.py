"""Ids that arrive a few at a time, decoded into text deltas that never split a character."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["StreamDecoder"]


class StreamDecoder:
    """Turns ids that arrive a few at a time into text deltas.

    A character whose UTF-8 bytes span several tokens is held back until it is complete, so
    no delta ever carries half a character (U+FFFD); `flush` returns whatever is held back at
    the end. Each `push` decodes only the ids since the last complete character.
    """

    def __init__(self, tokenizer: Any, *, skip_special_tokens: bool = False) -> None:
        self._tokenizer = tokenizer  # anything with decode(ids, skip_special_tokens=...)
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._start = 0  # first id not yet turned into emitted text
        self._text: list[str] = []

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return "".join(self._text)

    def push(self, token_ids: Iterable[int]) -> str:
        """Add ids; return the text they complete ("" while a character is still partial)."""
        self._ids.extend(token_ids)
        pending = self._decode(self._ids[self._start :])
        if not pending or pending.endswith("\ufffd"):
            return ""
        return self._emit(pending)

    def flush(self) -> str:
        """Return the held-back text, complete or not."""
        pending = self._decode(self._ids[self._start :])
        return self._emit(pending) if pending else ""

    def _emit(self, pending: str) -> str:
        self._start = len(self._ids)
        self._text.append(pending)
        return pending

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return str(self._tokenizer.decode(ids, skip_special_tokens=self._skip))
