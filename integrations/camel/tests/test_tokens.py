"""Offline token counters: bytes (an upper bound) and the served model's own tokenizer."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from rltap.testing.harness import tiny_renderer
from rltap_camel import ByteTokenCounter, TokenizerTokenCounter

TEXTS = [
    pytest.param("What is 2 + 2?", id="ascii"),
    pytest.param("Grüße aus Köln — 東京 🚀", id="unicode"),
    pytest.param("", id="empty"),
]
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a calculator."},
    {"role": "user", "content": [{"type": "text", "text": "What is 2 + 2?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
]


@pytest.mark.parametrize("text", TEXTS)
def test_bytes_round_trip(text: str) -> None:
    counter = ByteTokenCounter()
    assert counter.decode(counter.encode(text)) == text
    assert len(counter.encode(text)) == len(text.encode("utf-8"))


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The tiny model's (Qwen) tokenizer, as the proxies of this run already loaded it."""
    return tiny_renderer().tokenizer


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_counter_uses_the_model_s_tokenizer(tokenizer: Any, text: str) -> None:
    counter = TokenizerTokenCounter(tokenizer)
    assert counter.encode(text) == tokenizer.encode(text, add_special_tokens=False)
    assert counter.decode(counter.encode(text)) == text


def test_bytes_never_count_fewer_than_the_tokenizer(tokenizer: Any) -> None:
    exact = TokenizerTokenCounter(tokenizer).count_tokens_from_messages(MESSAGES)
    bound = ByteTokenCounter().count_tokens_from_messages(MESSAGES)
    assert 0 < exact <= bound


def test_every_part_of_a_message_counts() -> None:
    counter = ByteTokenCounter()
    empty = counter.count_tokens_from_messages([])
    user = {"role": "user", "content": "hi"}
    assert counter.count_tokens_from_messages([user]) == empty + 4 + 2
    for message in MESSAGES:
        assert counter.count_tokens_from_messages([message]) > empty + 4
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with_image = {"role": "user", "content": [{"type": "text", "text": "hi"}, image]}
    assert counter.count_tokens_from_messages([with_image]) > empty + 4 + 2


def test_a_counter_built_from_a_folder_pickles_as_the_folder(
    tiny_model_dir: Path, tokenizer: Any
) -> None:
    counter = TokenizerTokenCounter(tiny_model_dir)
    assert counter.encode("hello") == tokenizer.encode("hello")  # loaded from the folder
    assert len(pickle.dumps(counter)) < 1000  # the folder, not 151k vocabulary entries
