"""Ids that arrive a few at a time, decoded into text deltas that never split a character.

A Rust `tokenizers.Tokenizer` is decoded by the library's own incremental decoder,
`tokenizers.decoders.DecodeStream`. What is left here is what DecodeStream does not do: it has no
end of stream (a character still incomplete when generation stops stays inside it), so `flush`
decodes the ids it holds back; and it reads only Rust tokenizers, so a tokenizer without one
(or one whose `decode` rewrites the Rust text: `clean_up_tokenization_spaces`, which the renderer
decodes through transformers) is decoded the same way by hand, holding back while the text of
the ids since the last delta ends with U+FFFD.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

__all__ = ["StreamDecoder"]


class StreamDecoder:
    """Turns ids that arrive a few at a time into text deltas.

    A character whose UTF-8 bytes span several tokens is held back until it is complete, so
    no delta ever carries half a character (U+FFFD); `flush` returns whatever is held back at
    the end. `tokenizer` is a `tokenizers.Tokenizer` (decoded with DecodeStream) or anything
    with `decode(ids, skip_special_tokens=...)`.
    """

    def __init__(self, tokenizer: Any, *, skip_special_tokens: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._stream = self._new_stream()
        self._held: list[int] = []  # ids pushed since the last delta
        self._text: list[str] = []

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return "".join(self._text)

    def push(self, token_ids: Iterable[int]) -> str:
        """Add ids; return the text they complete ("" while a character is still partial)."""
        if self._stream is None:
            self._held += token_ids
            pending = self._decode(self._held) if self._held else ""
            if not pending or pending.endswith("\ufffd"):
                return ""
            self._held = []
            return self._emitted(pending)
        deltas: list[str] = []
        # One id a step: tokenizers 0.21's DecodeStream takes no list of ids.
        for token_id in token_ids:
            self._held.append(token_id)
            delta = self._stream.step(self._tokenizer, token_id)
            if delta is not None:
                deltas.append(delta)
                self._held = []
        return self._emitted("".join(deltas))

    def flush(self) -> str:
        """Return the held-back text, complete or not."""
        if not self._held:
            return ""
        pending = self._decode(self._held)
        self._held = []
        self._stream = self._new_stream()  # it still holds those ids; later pushes start after
        return self._emitted(pending)

    def _new_stream(self) -> DecodeStream | None:
        if not isinstance(self._tokenizer, Tokenizer):
            return None
        return DecodeStream(skip_special_tokens=self._skip)

    def _emitted(self, delta: str) -> str:
        if delta:
            self._text.append(delta)
        return delta

    def _decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=self._skip))
