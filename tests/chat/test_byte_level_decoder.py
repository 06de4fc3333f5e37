"""Token ids decoded from a table of token bytes give exactly the Rust tokenizer's text."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from rltap.chat.byte_level_decoder import ByteLevelDecoder

IM_END, THINK = 151645, 151667


@pytest.fixture(scope="module")
def decoder(qwen_backend: Any) -> ByteLevelDecoder:
    found = ByteLevelDecoder.for_backend(qwen_backend)
    assert found is not None
    return found


def test_every_token_alone(qwen_backend: Any, decoder: ByteLevelDecoder) -> None:
    size = qwen_backend.get_vocab_size(with_added_tokens=True)
    for token_id in range(size):
        for skip in (False, True):
            expected = qwen_backend.decode([token_id], skip_special_tokens=skip)
            assert decoder.decode([token_id], skip_special_tokens=skip) == expected, token_id


# Byte tokens that split UTF-8 characters (0x80-0xFF alone), ordinary words, added tokens.
PARTIAL_BYTES = list(range(94, 188))
IDS = st.sampled_from([*PARTIAL_BYTES, 9707, 11, 1879, 0, 220, 198, IM_END, THINK, 151643])


@settings(max_examples=400, deadline=None)
@given(ids=st.lists(IDS | st.integers(0, 151_000), max_size=24), skip=st.booleans())
def test_random_sequences_with_split_characters(
    qwen_backend: Any, decoder: ByteLevelDecoder, ids: list[int], skip: bool
) -> None:
    expected = qwen_backend.decode(ids, skip_special_tokens=skip)
    assert decoder.decode(ids, skip_special_tokens=skip) == expected


def test_ids_the_tokenizer_does_not_know_get_its_answer(
    qwen_backend: Any, decoder: ByteLevelDecoder
) -> None:
    unknown = [9707, 10**6]
    assert decoder.decode(unknown) == qwen_backend.decode(unknown)
    with pytest.raises(OverflowError):
        qwen_backend.decode([-1])
    with pytest.raises(OverflowError):
        decoder.decode([9707, -1])


def test_an_added_token_with_a_space_is_left_to_the_tokenizer() -> None:
    tokenizer = Tokenizer(models.BPE(vocab={"a": 0, "Ġ": 1}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<end of turn>"])
    decoder = ByteLevelDecoder.for_backend(tokenizer)
    assert decoder is not None
    for ids in ([0, 1, 2, 0], [2], [0, 1]):
        for skip in (False, True):
            expected = tokenizer.decode(ids, skip_special_tokens=skip)
            assert decoder.decode(ids, skip_special_tokens=skip) == expected


def test_a_tokenizer_without_a_byte_level_decoder_is_not_handled() -> None:
    tokenizer = Tokenizer(models.WordLevel(vocab={"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tokenizer.decoder = decoders.WordPiece()
    assert ByteLevelDecoder.for_backend(tokenizer) is None
