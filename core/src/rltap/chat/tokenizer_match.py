"""Whether two tokenizers give the same ids: a trainer's and the one rltap renders with.

A trainer that takes rltap's token ids (TRL's `rollout_func`, verl's agent loop) computes its
logprobs on them with its own model: ids rendered by another vocabulary would train the model
on text it never saw, silently. So a plugin compares the two at start and refuses a mismatch,
naming the first difference. Two tokenizers match when their vocabularies (token -> id), their
special tokens (eos, pad, bos) and their chat templates are the same; loading the same folder
twice matches.

Usage:
    problem = tokenizer_mismatch(trainer.processing_class, renderer.tokenizer)
    if problem is not None:
        raise TokenizerMismatch(problem)
"""

from __future__ import annotations

from typing import Any

from rltap.record.errors import RltapError

__all__ = ["TokenizerMismatch", "check_same_tokenizer", "tokenizer_mismatch"]

_SPECIAL = ("eos_token_id", "pad_token_id", "bos_token_id")


class TokenizerMismatch(RltapError):
    """The tokenizer rltap renders with is not the trainer's."""


def tokenizer_mismatch(trainer: Any, rendering: Any) -> str | None:
    """None when `trainer`'s and `rendering`'s tokenizers give the same ids; else the first
    difference, in words."""
    ours = _name(rendering)
    theirs = _name(trainer)
    vocab, other = trainer.get_vocab(), rendering.get_vocab()
    if vocab != other:
        missing = sorted(set(vocab) - set(other))
        moved = sorted(t for t in set(vocab) & set(other) if vocab[t] != other[t])
        where = (
            f"{len(missing)} of the trainer's tokens are not in it (first: {missing[0]!r})"
            if missing
            else f"token {moved[0]!r} is id {vocab[moved[0]]} for the trainer, {other[moved[0]]}"
            " for rltap"
            if moved
            else f"it has {len(other) - len(vocab)} tokens the trainer's has not"
        )
        return f"the vocabularies differ ({theirs} vs {ours}): {where}"
    for attribute in _SPECIAL:
        a, b = getattr(trainer, attribute, None), getattr(rendering, attribute, None)
        if a != b:
            return f"{attribute} differs: {a} for the trainer ({theirs}), {b} for rltap ({ours})"
    if getattr(trainer, "chat_template", None) != getattr(rendering, "chat_template", None):
        return f"the chat templates differ ({theirs} vs {ours})"
    return None


def check_same_tokenizer(trainer: Any, rendering: Any, *, trainer_name: str) -> None:
    """Raise `TokenizerMismatch` when `rendering` is not `trainer`'s tokenizer; `trainer_name`
    (TRL, verl) says whose tokenizer the message means."""
    problem = tokenizer_mismatch(trainer, rendering)
    if problem is not None:
        msg = (
            f"rltap renders with a tokenizer that is not {trainer_name}'s: {problem}. Serve the "
            f"model {trainer_name} trains (its tokenizer), or the ids and logprobs rltap records "
            "mean other text to the trainer"
        )
        raise TokenizerMismatch(msg)


def _name(tokenizer: Any) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
