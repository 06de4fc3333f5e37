"""Encoding piece by piece, with pieces cached, gives exactly the tokenizer's own ids."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer

from rltap.chat.piece_encoder import PieceEncoder
from rltap.chat.renderer import ChatRenderer

ADDED = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<think>"]
# Near misses of the added tokens, and the characters pre-tokenisation cares about: contractions
# in any case, digits, symbol runs with trailing newlines, whitespace runs.
FRAGMENTS = ["<|im_", "_end|>", "<tool", "call>", "|>", "<", "\n", "\r\n", " ", "  ", "'s", "12"]
FRAGMENTS += ["'S", "'ll", "'LL", "'re", "'d", "ABC", "?\n\n", "  \n", " \t ", "$x", "...", "0x1F"]


@pytest.fixture(scope="module")
def encoder(qwen_backend: Any) -> PieceEncoder:
    encoder = PieceEncoder.for_backend(qwen_backend)
    assert encoder is not None
    return encoder


texts = st.lists(
    st.one_of(
        st.sampled_from(ADDED),
        st.sampled_from(FRAGMENTS),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    ),
    max_size=12,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=texts)
def test_piece_ids_equal_the_tokenizers_ids(
    encoder: PieceEncoder, qwen_backend: Any, text: str
) -> None:
    expected = qwen_backend.encode(text, add_special_tokens=False).ids
    assert encoder.encode(text) == expected
    assert encoder.encode(text) == expected  # again, now from the cache


def test_a_chat_prompt_encodes_as_a_whole(qwen_tokenizer: Any, encoder: PieceEncoder) -> None:
    renderer = ChatRenderer(qwen_tokenizer)
    for number in range(3):
        messages = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"Question {number}: what is 2 + 2?"},
        ]
        text = renderer.render_text(messages)
        assert encoder.encode(text) == qwen_tokenizer.encode(text, add_special_tokens=False)
        assert renderer.render(messages).input_ids == encoder.encode(text)


def test_the_cache_keeps_at_most_its_limit(qwen_backend: Any) -> None:
    added = {str(t.content): i for i, t in qwen_backend.get_added_tokens_decoder().items()}
    small = PieceEncoder(qwen_backend, added, max_entries=8, max_piece_chars=16)
    for number in range(100):
        text = f"<|im_start|>user\n{number}<|im_end|>"
        assert small.encode(text) == qwen_backend.encode(text, add_special_tokens=False).ids
    assert small.cache_size() == 8
    long_piece = "x " * 9
    assert small.encode(long_piece) == qwen_backend.encode(long_piece).ids
    assert small.cache_size() == 8


def test_threads_sharing_an_encoder_get_the_tokenizers_ids(qwen_backend: Any) -> None:
    added = {str(t.content): i for i, t in qwen_backend.get_added_tokens_decoder().items()}
    shared = PieceEncoder(qwen_backend, added, max_entries=16)
    texts = [f"<|im_start|>user\nquestion {number}<|im_end|>\n" for number in range(64)]

    def work(offset: int) -> list[list[int]]:
        return [shared.encode(texts[(n * 7 + offset) % len(texts)]) for n in range(1500)]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch inside the cache's bookkeeping, if unlocked
    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(work, range(8)))  # a thread's exception is raised here
    finally:
        sys.setswitchinterval(interval)
    for offset, ids in enumerate(results):
        wanted = [texts[(n * 7 + offset) % len(texts)] for n in range(1500)]
        assert ids == [qwen_backend.encode(t, add_special_tokens=False).ids for t in wanted]
    assert shared.cache_size() == 16


def test_every_ascii_character_in_every_position(encoder: PieceEncoder, qwen_backend: Any) -> None:
    for code in range(128):
        char = chr(code)
        for text in (
            char,
            f"a{char}b",
            f"{char * 3} x",
            f" {char}\n\n'S",
            f"1{char}2",
            f"{char}'s",
        ):
            expected = qwen_backend.encode(text, add_special_tokens=False).ids
            assert encoder.encode(text) == expected, text


def test_non_ascii_text_between_added_tokens(encoder: PieceEncoder, qwen_backend: Any) -> None:
    text = (
        "<|im_start|>user\nCafé ß ſ 𝔘 İ K Ⅻ ½ ٣ — ok<|im_end|>\n<|im_start|>user\nplain'S<|im_end|>"
    )
    assert encoder.encode(text) == qwen_backend.encode(text, add_special_tokens=False).ids


def test_a_tokenizer_whose_added_tokens_strip_whitespace_is_not_cut_here(qwen_backend: Any) -> None:
    stripping = Tokenizer.from_str(qwen_backend.to_str())
    stripping.add_special_tokens([AddedToken("<mask>", lstrip=True)])
    assert PieceEncoder.for_backend(stripping) is None
    text = "a <mask> b"
    assert stripping.encode(text).ids != [
        *stripping.encode("a ").ids,
        stripping.token_to_id("<mask>"),
        *stripping.encode(" b").ids,
    ]  # why: lstrip swallows the space before the token


def test_normalized_added_tokens_are_not_cut_here(qwen_backend: Any) -> None:
    config = json.loads(qwen_backend.to_str())
    config["added_tokens"][0]["normalized"] = True
    assert PieceEncoder.for_backend(Tokenizer.from_str(json.dumps(config))) is None


def test_the_longest_added_token_wins_where_two_start_at_one_place(qwen_backend: Any) -> None:
    overlapping = Tokenizer.from_str(qwen_backend.to_str())
    overlapping.add_special_tokens(["<x>", "<x>y"])
    encoder = PieceEncoder.for_backend(overlapping)
    assert encoder is not None
    for text in ("<x>yz", "a<x>b", "<x><x>y<x>"):
        assert encoder.encode(text) == overlapping.encode(text, add_special_tokens=False).ids
