"""Text to token ids, cut at the tokenizer's added tokens, with each piece's ids cached.

A Hugging Face (Rust) tokenizer first cuts the text at its added tokens (`<|im_start|>`,
`<|im_end|>`, `<tool_call>`, ...) and then normalises, pre-tokenises and encodes each piece in
between on its own. A piece's ids therefore never depend on its neighbours, and chat prompts
repeat most pieces: the system prompt, `assistant\\n`, the `\\n` between turns. So pieces are
encoded with the tokenizer's public `encode` and cached; only new text reaches the tokenizer.

The cut is the tokenizer's own only when every added token matches verbatim: no `lstrip`,
`rstrip` or `single_word`, and not matched after normalisation. `PieceEncoder.for_backend`
returns None otherwise, and the caller encodes whole texts.

Usage:
    encoder = PieceEncoder.for_backend(tokenizer.backend_tokenizer)
    ids = encoder.encode("<|im_start|>user\\nHi<|im_end|>\\n")
"""

from __future__ import annotations

import re
import threading
from typing import Any

from cachetools import LRUCache

__all__ = ["PieceEncoder"]


class PieceEncoder:
    """`backend.encode(text, add_special_tokens=False).ids`, piece by piece, pieces cached.

    The `max_entries` most recently used pieces of up to `max_piece_chars` characters are kept,
    so the cache stays bounded however many distinct texts pass through; a longer piece (a long
    user message, rarely repeated) is encoded every time.
    """

    def __init__(
        self,
        backend: Any,
        added: dict[str, int],
        *,
        max_entries: int = 8192,
        max_piece_chars: int = 2048,
    ) -> None:
        self._backend = backend
        self._added = added
        # Longest first: at one position the longest added token wins, as in the tokenizer.
        alternatives = sorted(added, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, alternatives)) + ")").split
        self._cache: LRUCache[str, list[int]] = LRUCache(maxsize=max_entries)
        self._cache_lock = threading.Lock()  # cachetools' caches are not thread-safe
        self._max_piece_chars = max_piece_chars

    @classmethod
    def for_backend(cls, backend: Any) -> PieceEncoder | None:
        """An encoder for a `tokenizers.Tokenizer`, or None if its cut can't be reproduced."""
        try:
            tokens = backend.get_added_tokens_decoder()
        except AttributeError:
            return None
        added: dict[str, int] = {}
        for token_id, token in tokens.items():
            if token.lstrip or token.rstrip or token.single_word or token.normalized:
                return None
            if not token.content:
                return None
            added[str(token.content)] = int(token_id)
        if not added:
            return None
        return cls(backend, added)

    def encode(self, text: str) -> list[int]:
        """The tokenizer's ids for `text` (no special tokens added)."""
        ids: list[int] = []
        for index, piece in enumerate(self._split(text)):
            if index % 2:  # odd places hold the added tokens the split kept
                ids.append(self._added[piece])
            elif piece:
                ids += self._piece_ids(piece)
        return ids

    def cache_size(self) -> int:
        """How many pieces are cached now."""
        return len(self._cache)

    def _piece_ids(self, piece: str) -> list[int]:
        # A lookup by hand, not cachetools' `cachedmethod`, which builds a key tuple per piece:
        # a 33-message prompt encoded in 0.11 ms with it, 0.085 ms so (CPU time, this host).
        with self._cache_lock:
            ids = self._cache.get(piece)
        if ids is None:
            ids = list(self._backend.encode(piece, add_special_tokens=False).ids)
            if len(piece) <= self._max_piece_chars:
                with self._cache_lock:
                    self._cache[piece] = ids
        return ids
