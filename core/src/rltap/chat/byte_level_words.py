"""ASCII text to token ids for a byte-level BPE tokenizer: words split in Python, ids cached.

Encoding a new piece of prompt text with the Rust tokenizer costs ~25 µs for a short sentence, and
two or three times that on a busy host: most of it is the pre-tokenizer's regular expression, then
the Encoding object (offsets, token strings) that the proxy never reads. For the tokenizers of
Qwen2/2.5/3, Llama 3 and their kind (byte-level BPE behind one `Split` regex), a word's ids depend
on that word alone. So the split runs here, with the tokenizer's own pattern (its `\\p{L}` and
`\\p{N}` spelled as ASCII classes for the standard `re` module, or as written for `regex`), and
each word's ids are cached: a sentence costs a `findall` and a few dict lookups.

Only ASCII text takes this path. Onig (the tokenizer's regex engine) and `regex` agree on what
`\\s`, `\\p{L}` and `\\p{N}` match in ASCII; for other scripts their Unicode tables and case
folding could differ, so non-ASCII text goes to the Rust tokenizer. A test checks equality with
the tokenizer on every ASCII character and on random ASCII text.

`ByteLevelWords.for_backend` returns None for any other tokenizer structure (a normalizer other
than NFC, other pre-tokenizers, BPE dropout, a model other than BPE); the caller then encodes with
the Rust tokenizer.

Usage:
    words = ByteLevelWords.for_backend(tokenizer.backend_tokenizer)
    ids = words.encode("user\\nWhat is the capital of France?")   # ASCII only
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import regex

__all__ = ["BYTE_TO_UNICODE", "ByteLevelWords", "component_config", "is_plain_bpe"]


def _byte_to_unicode() -> list[str]:
    """GPT-2's byte-level alphabet: the character each byte is written as before BPE."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


BYTE_TO_UNICODE = _byte_to_unicode()
"""The character each byte 0-255 is written as in a byte-level BPE vocabulary."""


# Words longer than this are encoded every time they occur, so the cache stays small.
_MAX_CACHED_WORD = 64


class ByteLevelWords:
    """`backend.encode(text, add_special_tokens=False).ids` for ASCII text without added tokens.

    At most `max_words` words of up to 64 characters are cached (oldest out first).
    """

    def __init__(self, model: Any, pattern: str, *, max_words: int = 65536) -> None:
        self._model = model
        self._findall = _ascii_findall(pattern)
        self._words: dict[str, list[int]] = {}
        self._max_words = max_words

    @classmethod
    def for_backend(cls, backend: Any) -> ByteLevelWords | None:
        """The encoder for a `tokenizers.Tokenizer` of the supported structure, else None."""
        try:
            pattern = _split_pattern(component_config(backend.pre_tokenizer))
            normalizer = component_config(backend.normalizer) or {"type": "NFC"}
        except (AttributeError, ValueError, TypeError):
            return None
        if pattern is None or not is_plain_bpe(backend) or normalizer.get("type") != "NFC":
            return None
        try:
            regex.compile(pattern)
        except regex.error:
            return None
        return cls(backend.model, pattern)

    def encode(self, text: str) -> list[int] | None:
        """The ids of ASCII `text`; None when the pattern leaves some of it unmatched.

        NFC leaves ASCII unchanged, so no normalisation is needed. The tokenizer keeps what lies
        between matches as words of their own; a pattern that leaves gaps is rare (the known ones
        match every character), so such text is left to the tokenizer instead.
        """
        found = self._findall(text)
        if sum(map(len, found)) != len(text):
            return None
        ids: list[int] = []
        words = self._words
        for word in found:
            word_ids = words.get(word)
            if word_ids is None:
                word_ids = self._encode_word(word)
            ids += word_ids
        return ids

    def _encode_word(self, word: str) -> list[int]:
        mapped = "".join([BYTE_TO_UNICODE[b] for b in word.encode()])
        word_ids = [token.id for token in self._model.tokenize(mapped)]
        if len(word) <= _MAX_CACHED_WORD:  # a long run of letters is rare: not worth its memory
            if len(self._words) >= self._max_words:
                del self._words[next(iter(self._words))]
            self._words[word] = word_ids
        return word_ids


def _ascii_findall(pattern: str) -> Callable[[str], list[str]]:
    """`findall` of `pattern` for ASCII text: the standard `re` module's where the pattern
    translates to ASCII classes (about twice as fast as `regex` here), else `regex`'s."""
    translated = _ascii_pattern(pattern)
    if translated is not None:
        try:
            return re.compile(translated, re.ASCII).findall
        except re.error:
            pass
    return regex.compile(pattern).findall


_ASCII_PROPERTIES = {"L": "a-zA-Z", "N": "0-9"}
_PROPERTY = re.compile(r"\\([pP])\{(\w+)\}")


def _ascii_pattern(pattern: str) -> str | None:
    """`pattern` with `\\p{L}` and `\\p{N}` spelled as ASCII classes, or None if it uses any
    other Unicode property or a class inside a class (which `re` reads differently)."""
    out: list[str] = []
    at = 0
    class_start = -1  # where the open character class began, -1 outside one
    while at < len(pattern):
        char = pattern[at]
        if char == "\\":
            found = _PROPERTY.match(pattern, at)
            if found is not None:
                ascii_class = _ASCII_PROPERTIES.get(found.group(2))
                if found.group(1) == "P" or ascii_class is None:
                    return None
                out.append(ascii_class if class_start >= 0 else f"[{ascii_class}]")
                at = found.end()
                continue
            out.append(pattern[at : at + 2])
            at += 2
            continue
        if char == "[":
            if class_start >= 0:
                return None
            class_start = at
        # A `]` first in a class (after an optional `^`) is a literal, not its end.
        elif char == "]" and class_start >= 0 and pattern[class_start + 1 : at] not in ("", "^"):
            class_start = -1
        out.append(char)
        at += 1
    return "".join(out)


def component_config(component: Any) -> dict[str, Any]:
    """The JSON settings of a tokenizer component (normalizer, pre-tokenizer, decoder); {} for
    None. Read from the component alone: `Tokenizer.to_str()` would serialise the whole
    vocabulary, half a second for Qwen's."""
    if component is None:
        return {}
    config = json.loads(component.__getstate__())
    return config if isinstance(config, dict) else {}


def is_plain_bpe(backend: Any) -> bool:
    """Whether the tokenizer's model is BPE without dropout (each word always one way)."""
    model = backend.model
    return type(model).__name__ == "BPE" and getattr(model, "dropout", None) in (None, 0.0)


def _split_pattern(pre: dict[str, Any]) -> str | None:
    """The Split regex of a `Sequence[Split(regex, Isolated), ByteLevel(no prefix, no regex)]`
    pre-tokenizer, or None for any other pre-tokenizer."""
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not steps or len(steps) != 2:
        return None
    split, byte_level = steps
    if (
        split.get("type") != "Split"
        or split.get("behavior") != "Isolated"
        or split.get("invert")
        or byte_level.get("type") != "ByteLevel"
        or byte_level.get("add_prefix_space")
        or byte_level.get("use_regex")
    ):
        return None
    pattern = (split.get("pattern") or {}).get("Regex")
    return pattern if isinstance(pattern, str) else None
