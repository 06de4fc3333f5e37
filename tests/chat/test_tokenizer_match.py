"""A trainer's tokenizer against the one rltap renders with: the same folder matches; another
vocabulary, special token or chat template is named."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from rltap.chat.tokenizer_match import TokenizerMismatch, check_same_tokenizer, tokenizer_mismatch


def test_a_tokenizer_matches_a_copy_of_itself(qwen_tokenizer: Any) -> None:
    assert tokenizer_mismatch(qwen_tokenizer, copy.deepcopy(qwen_tokenizer)) is None
    check_same_tokenizer(qwen_tokenizer, copy.deepcopy(qwen_tokenizer), trainer_name="TRL")


def test_another_vocabulary_is_refused_with_the_first_token_that_differs(
    qwen_tokenizer: Any,
) -> None:
    other = copy.deepcopy(qwen_tokenizer)
    other.add_tokens(["<rltap-extra>"])
    problem = tokenizer_mismatch(qwen_tokenizer, other)
    assert problem is not None
    assert "vocabularies differ" in problem
    with pytest.raises(TokenizerMismatch, match="not verl's: the vocabularies differ"):
        check_same_tokenizer(qwen_tokenizer, other, trainer_name="verl")


def test_another_eos_or_chat_template_is_refused(qwen_tokenizer: Any) -> None:
    other = copy.deepcopy(qwen_tokenizer)
    other.chat_template = "{{ messages[0]['content'] }}"
    assert tokenizer_mismatch(qwen_tokenizer, other) is not None
    assert "chat templates differ" in str(tokenizer_mismatch(qwen_tokenizer, other))
