"""Token counters for CAMEL that never download anything.

CAMEL counts tokens to trim an agent's memory and decide when to summarize it. Its default counter
(`OpenAITokenCounter`) fetches a tiktoken encoding from the internet on first use, which fails on
an offline training node. The proxy counts the real tokens; CAMEL only needs a count that never
falls short, so context trimming happens before the proxy would refuse a call.

    ByteTokenCounter        UTF-8 bytes: no files, an upper bound of any byte-level BPE count
    TokenizerTokenCounter   the served model's own tokenizer from a local folder: exact
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from camel.utils import BaseTokenCounter

__all__ = ["ByteTokenCounter", "TokenizerTokenCounter"]

# What a chat template adds around each message (role header, end-of-turn token) and before the
# reply, as OpenAI's own counting recipe reckons it; generous for ChatML-style templates.
_PER_MESSAGE = 4
_PER_REPLY = 3


def _message_texts(message: Mapping[str, Any]) -> list[str]:
    """The text of a message that the template renders: content parts, name, tool calls."""
    texts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, Sequence):
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:  # an image or audio part: count its serialised form, never nothing
                texts.append(json.dumps(part, default=str))
    for key in ("name", "tool_call_id", "reasoning_content"):
        value = message.get(key)
        if isinstance(value, str):
            texts.append(value)
    if message.get("tool_calls"):
        texts.append(json.dumps(message["tool_calls"], default=str))
    return texts


class _TextTokenCounter(BaseTokenCounter):
    """Counts messages as the sum of their texts' encoded lengths plus template overhead."""

    def count_tokens_from_messages(self, messages: list[Any]) -> int:
        total = _PER_REPLY
        for message in messages:
            total += _PER_MESSAGE
            total += sum(len(self.encode(text)) for text in _message_texts(message))
        return total


class ByteTokenCounter(_TextTokenCounter):
    """Counts UTF-8 bytes: needs no file and never under-counts a byte-level BPE tokenizer.

    Every token of a byte-level BPE vocabulary (Qwen, Llama 3, GPT, SmolLM) covers at least one
    byte, so the count is an upper bound: English text counts about 3-4x its real token count.
    Pair it with a `context_window` that allows for that, or use `TokenizerTokenCounter`.

    Usage:
        ProxyModel(connection, token_counter=ByteTokenCounter())
    """

    def encode(self, text: str) -> list[int]:
        """The text's UTF-8 bytes as ids (0-255)."""
        return list(text.encode("utf-8"))

    def decode(self, token_ids: list[int]) -> str:
        """The text of ids made by `encode`; a cut multi-byte character becomes U+FFFD."""
        return bytes(token_ids).decode("utf-8", errors="replace")


class TokenizerTokenCounter(_TextTokenCounter):
    """Counts with the served model's tokenizer, loaded from a local folder on first use.

    Usage:
        TokenizerTokenCounter("/models/Qwen3-8B")  # the folder the engine serves
    """

    def __init__(self, tokenizer: str | os.PathLike[str] | Any) -> None:
        if isinstance(tokenizer, str | os.PathLike):
            self._path: str | None = os.fspath(tokenizer)
            self._tokenizer: Any = None
        else:
            self._path = None
            self._tokenizer = tokenizer

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer (loaded from the folder without touching the hub)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._path, local_files_only=True)
        return self._tokenizer

    def encode(self, text: str) -> list[int]:
        """The tokenizer's ids for `text`, without special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: list[int]) -> str:
        """The text of `token_ids`."""
        return str(self.tokenizer.decode(token_ids))

    def __getstate__(self) -> dict[str, Any]:
        # A counter built from a folder travels as the folder (to subprocess workers).
        state = dict(self.__dict__)
        if self._path is not None:
            state["_tokenizer"] = None
        return state
