"""ASCII words split in Python encode exactly as the Rust tokenizer encodes the whole text."""

from __future__ import annotations

import random
import re
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

from rltap.chat.byte_level_words import ByteLevelWords, _ascii_pattern
from rltap.chat.piece_encoder import PieceEncoder

ASCII = st.text(alphabet=st.characters(max_codepoint=127), max_size=60)
# Pieces that exercise every branch of the Qwen / Llama 3 pattern: contractions in any case,
# letters after a symbol, digits one by one, symbol runs with trailing newlines, whitespace runs.
FRAGMENTS = ["'s", "'S", "'ll", "'LL", "'re", "'d", "abc", "ABC", " x", "\n", "\r\n", "  ", "\t"]
FRAGMENTS += ["123", "!!", "?\n\n", "  \n", " \t ", "$x", "'", '"', "{", "}", "...", "_a", "0x1F"]


@pytest.fixture(scope="module")
def words(qwen_backend: Any) -> ByteLevelWords:
    encoder = ByteLevelWords.for_backend(qwen_backend)
    assert encoder is not None
    return encoder


def test_every_ascii_character_in_every_position(qwen_backend: Any, words: ByteLevelWords) -> None:
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
            assert words.encode(text) == qwen_backend.encode(text, add_special_tokens=False).ids, (
                text
            )


@settings(max_examples=300, deadline=None)
@given(text=ASCII | st.lists(st.sampled_from(FRAGMENTS), max_size=15).map("".join))
def test_random_ascii_text(qwen_backend: Any, words: ByteLevelWords, text: str) -> None:
    assert words.encode(text) == qwen_backend.encode(text, add_special_tokens=False).ids


def test_many_random_sentences_with_the_word_cache_warm(
    qwen_backend: Any, words: ByteLevelWords
) -> None:
    rng = random.Random(7)
    alphabet = [*string.printable, *FRAGMENTS]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert words.encode(text) == qwen_backend.encode(text, add_special_tokens=False).ids


def test_piece_encoder_still_matches_with_non_ascii_text(qwen_backend: Any) -> None:
    encoder = PieceEncoder.for_backend(qwen_backend)
    assert encoder is not None
    text = (
        "<|im_start|>user\nCafé ß ſ 𝔘 İ K Ⅻ ½ ٣ — ok<|im_end|>\n<|im_start|>user\nplain'S<|im_end|>"
    )
    assert encoder.encode(text) == qwen_backend.encode(text, add_special_tokens=False).ids


def _byte_level_bpe(pattern: str) -> Tokenizer:
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: index for index, char in enumerate(sorted(alphabet))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return tokenizer


def test_a_pattern_that_leaves_gaps_is_left_to_the_tokenizer() -> None:
    tokenizer = _byte_level_bpe("[a-z]+")
    words = ByteLevelWords.for_backend(tokenizer)
    assert words is not None
    assert words.encode("abc") == tokenizer.encode("abc").ids
    assert words.encode("ab 12") is None  # " 12" lies between matches
    encoder = PieceEncoder.for_backend(tokenizer)
    if encoder is not None:  # this tokenizer has no added tokens: no piece encoder either
        assert encoder.encode("ab 12") == tokenizer.encode("ab 12").ids


def test_other_tokenizer_structures_are_not_handled() -> None:
    word_level = Tokenizer(models.WordLevel(vocab={"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    assert ByteLevelWords.for_backend(word_level) is None
    plain_byte_level = _byte_level_bpe(".")
    plain_byte_level.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert ByteLevelWords.for_backend(plain_byte_level) is None


def test_the_word_cache_is_bounded(qwen_backend: Any) -> None:
    # Letters only: one word under this pattern and under the tokenizer's own.
    words = ByteLevelWords(qwen_backend.model, r"[a-z]+", max_words=3)
    for text in ("a", "b", "c", "d", "hello", "a"):
        assert words.encode(text) == qwen_backend.encode(text, add_special_tokens=False).ids
    assert len(words._words) <= 3


@pytest.mark.parametrize(
    ("pattern", "translated"),
    [
        pytest.param(r"\p{L}+|\p{N}", "[a-zA-Z]+|[0-9]", id="outside-a-class"),
        pytest.param(r"[^\r\n\p{L}\p{N}]?", r"[^\r\na-zA-Z0-9]?", id="inside-a-class"),
        pytest.param(r"[]\p{L}]", "[]a-zA-Z]", id="leading-bracket-is-literal"),
        pytest.param(r"[^]x]\p{N}", "[^]x][0-9]", id="leading-bracket-after-caret"),
        pytest.param(r"\\p{L}", r"\\p{L}", id="escaped-backslash"),
        pytest.param(r"\p{Lu}", None, id="other-property"),
        pytest.param(r"\P{L}", None, id="negated-property"),
        pytest.param(r"[a[b]]", None, id="class-in-a-class"),
    ],
)
def test_ascii_spelling_of_unicode_classes(pattern: str, translated: str | None) -> None:
    assert _ascii_pattern(pattern) == translated


def test_the_qwen_pattern_runs_on_the_standard_re_module(words: ByteLevelWords) -> None:
    # The exhaustive tests above then check the translated pattern against the tokenizer.
    assert getattr(words._findall, "__self__", None).__class__ is re.Pattern


def test_long_words_are_encoded_but_not_cached(qwen_backend: Any, words: ByteLevelWords) -> None:
    text = "x" * 5000
    assert words.encode(text) == qwen_backend.encode(text, add_special_tokens=False).ids
    assert text not in words._words
