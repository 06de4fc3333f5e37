"""Token ids to text for a byte-level BPE tokenizer: each token's bytes looked up, then UTF-8.

The proxy decodes every reply (and, streaming, every few tokens). The Rust tokenizer's `decode`
costs ~2 µs on a warm CPU and ten times that on a busy host, mostly in crossing into Rust and
building the token strings. For a byte-level BPE tokenizer (Qwen, Llama 3, GPT-2 style) a
token's text is a fixed string of bytes, so decoding is a join of looked-up bytes and one UTF-8
decode, with the same replacement characters as the tokenizer's (both replace each maximal
invalid subsequence with one U+FFFD).

Added tokens (`<|im_end|>`, `<tool_call>`) decode to their own text; those whose text is not
printable ASCII, and ids the tokenizer does not know, are left to the Rust tokenizer: `decode`
hands the whole call to it. `ByteLevelDecoder.for_backend` returns None for a tokenizer whose
decoder is not a plain ByteLevel one.

Usage:
    decoder = ByteLevelDecoder.for_backend(tokenizer.backend_tokenizer)
    text = decoder.decode([9707, 11, 1879, 0])   # "Hello, world!"
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rltap.chat.byte_level_words import BYTE_TO_UNICODE, component_config, is_plain_bpe

__all__ = ["ByteLevelDecoder"]


def _printable_ascii(text: str) -> bool:
    # These characters stand for themselves in the byte-level alphabet, so it makes no
    # difference whether the tokenizer passes an added token through its decoder or not.
    return bool(text) and all("!" <= char <= "~" for char in text)


class ByteLevelDecoder:
    """`backend.decode(ids, skip_special_tokens=...)`, answered from a table of token bytes."""

    def __init__(self, backend: Any, table: list[bytes | None], special: frozenset[int]) -> None:
        self._backend = backend
        self._table = table
        self._special = special

    @classmethod
    def for_backend(cls, backend: Any) -> ByteLevelDecoder | None:
        """The decoder for a `tokenizers.Tokenizer` with a ByteLevel decoder, else None."""
        try:
            if component_config(backend.decoder).get("type") != "ByteLevel":
                return None
            if not is_plain_bpe(backend):
                return None
            vocab: dict[str, int] = backend.get_vocab(with_added_tokens=False)
            added = backend.get_added_tokens_decoder()
        except (AttributeError, ValueError, TypeError):
            return None
        size = max([*vocab.values(), *added.keys(), -1]) + 1
        table: list[bytes | None] = [None] * size
        byte_of = {char: byte for byte, char in enumerate(BYTE_TO_UNICODE)}
        for token, token_id in vocab.items():
            if all(char in byte_of for char in token):
                table[token_id] = bytes([byte_of[char] for char in token])
        for token_id, token in added.items():
            content = str(token.content)
            table[token_id] = content.encode() if _printable_ascii(content) else None
        special = frozenset(int(i) for i, token in added.items() if token.special)
        return cls(backend, table, special)

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        table = self._table
        try:
            if token_ids and min(token_ids) < 0:
                raise IndexError  # not an id: the tokenizer says so in its own words
            if skip_special_tokens:
                special = self._special
                parts = [table[i] for i in token_ids if i not in special]
            else:
                parts = [table[i] for i in token_ids]
            return b"".join(parts).decode("utf-8", "replace")  # type: ignore[arg-type]
        except (IndexError, TypeError):  # an unknown id, or a token left to the tokenizer
            ids = list(token_ids)
            return str(self._backend.decode(ids, skip_special_tokens=skip_special_tokens))
