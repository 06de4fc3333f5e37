"""Pieces of grammars in llguidance's Lark dialect, for the grammars of `rltap.chat.constraints`.

A grammar describes the text of a whole reply. Text is written as string literals; a tag that is
one token of the model's vocabulary (`<tool_call>`, `[TOOL_CALLS]`, `</think>`) is written by its
token id, `<[151657]>`: the model emits it as the single token it was trained on, and free text
(a regex) can never produce it, since llguidance keeps special tokens out of text.

Usage:
    tokens = TokenSyntax({"<tool_call>": 151657})
    tokens.tag("<tool_call>")         # '<[151657]>'
    tokens.tag("<call>")              # '"<call>"' (not one token: plain text)
    literal('{"a": 1}')               # '"{\\"a\\": 1}"'
    text_without(("<tool_call>",))    # a regex terminal: any text not holding the tag
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

__all__ = ["ANY_TEXT", "TokenSyntax", "literal", "regex_escape", "text_without"]

ANY_TEXT = r"/(.|\n)*/"
"""Any text (possibly empty); special tokens are never text."""

# Characters with a meaning in a Rust regex, and `/`, which closes a Lark regex.
_REGEX_META = frozenset("\\.+*?()|[]{}^$#&-~/")


def literal(text: str) -> str:
    """`text` as a Lark string literal (JSON's escapes, which llguidance reads)."""
    return json.dumps(text)


def regex_escape(text: str) -> str:
    """`text` matched literally inside a Lark `/.../` regex."""
    out: list[str] = []
    for char in text:
        if char == "\n":
            out.append(r"\n")
        elif char in _REGEX_META:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def text_without(texts: Iterable[str], *, within: str = ANY_TEXT) -> str:
    """A regex terminal for the text `within` matches in which none of `texts` occurs."""
    parts = [within]
    parts.extend(rf"~/(.|\n)*{regex_escape(t)}(.|\n)*/" for t in texts if t)
    return " & ".join(parts)


class TokenSyntax:
    """Writes tags for one tokenizer: a tag that is one added token by its id, else as text.

    `added_tokens` maps the text of each added token to its id (a Hugging Face tokenizer's
    `get_added_vocab()`).
    """

    def __init__(self, added_tokens: Mapping[str, int]) -> None:
        self._ids = dict(added_tokens)

    def has_token(self, text: str) -> bool:
        """Whether `text` is one added token of the vocabulary."""
        return text in self._ids

    def tag(self, text: str) -> str:
        """`text` in a grammar rule: its token id if it is one added token, else a literal."""
        token = self._ids.get(text)
        return f"<[{token}]>" if token is not None else literal(text)
