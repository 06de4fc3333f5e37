"""Constrained decoding with llguidance: one matcher per request, a token mask per decode step.

`GrammarTokenizer` is llguidance's view of an engine's Hugging Face tokenizer; building it walks
the whole vocabulary (seconds for 150k tokens), so an engine builds it once, on its first
constrained request. `RequestGrammar` follows one request's `Constraint` token by token:
`allowed_tokens` gives the rows' masks for a step, `advance` feeds the sampled token.

The end of a reply is the request's own business, not llguidance's: the matcher's idea of EOS is
replaced by the request's end ids (the engine's eos ids and the request's `stop_token_ids`),
allowed exactly when the grammar accepts; when the grammar is complete and no end id exists the
reply ends with its last grammar token.

Torch-free (numpy), so the scripted engine's check and tests need no tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import llguidance
import llguidance.numpy
import numpy as np

from rltap.chat.grammar_tokenizer import llguidance_tokenizer
from rltap.record.errors import EngineError, InvalidRequest
from rltap.record.types import Constraint

__all__ = ["GrammarTokenizer", "RequestGrammar", "allowed_tokens"]


class GrammarTokenizer:
    """llguidance's tokenizer for one Hugging Face fast tokenizer (built once per process,
    `rltap.chat.grammar_tokenizer`), and the matchers made from it.

    `vocab_size` is the width of the model's logits (it may exceed the tokenizer's vocabulary:
    padded embedding rows are never allowed).
    """

    def __init__(self, hf_tokenizer: Any, vocab_size: int) -> None:
        self._hf_tokenizer = hf_tokenizer
        self._vocab_size = vocab_size

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def get(self) -> llguidance.LLTokenizer:
        """The llguidance tokenizer (the first call in the process builds it; any thread)."""
        if self._hf_tokenizer is None:
            msg = "constrained decoding needs the model's tokenizer; this engine has none"
            raise EngineError(msg)
        try:
            return llguidance_tokenizer(self._hf_tokenizer)
        except ValueError as exc:  # a slow (Python) tokenizer
            msg = f"constrained decoding needs a fast tokenizer: {exc}"
            raise EngineError(msg) from exc

    def matcher(self, constraint: Constraint, end_ids: Sequence[int]) -> RequestGrammar:
        """A fresh matcher for `constraint`; a grammar llguidance cannot compile is a 400."""
        tokenizer = self.get()
        matcher = llguidance.LLMatcher(tokenizer, constraint.grammar, log_level=0)
        if matcher.is_error():
            error = _first_line(matcher.get_error())
            msg = f"{constraint.reason}: the grammar does not compile: {error}"
            raise InvalidRequest(msg)
        return RequestGrammar(
            matcher,
            constraint,
            end_ids=[t for t in end_ids if 0 <= t < self._vocab_size],
            grammar_eos_ids=tokenizer.eos_tokens,
            mask_width=tokenizer.vocab_size,
        )


def _first_line(error: str) -> str:
    # llguidance appends its parser state (dozens of lines) to the reason.
    return error.strip().splitlines()[0] if error.strip() else error


class RequestGrammar:
    """One request's position in its grammar."""

    def __init__(
        self,
        matcher: llguidance.LLMatcher,
        constraint: Constraint,
        *,
        end_ids: Sequence[int],
        grammar_eos_ids: Sequence[int],
        mask_width: int,
    ) -> None:
        self._matcher = matcher
        self.mask_width = mask_width  # the tokenizer's vocabulary (logits may be wider)
        self.constraint = constraint
        self._end_ids = np.array(sorted(set(end_ids)), dtype=np.int64)
        self._grammar_eos_ids = np.array(sorted(set(grammar_eos_ids)), dtype=np.int64)
        self._end_set = frozenset(int(t) for t in self._end_ids)
        # Set when the matcher broke (it never should: only allowed tokens are sampled); the
        # engine then fails this request alone, not the batch.
        self.error: EngineError | None = None

    @property
    def complete(self) -> bool:
        """The grammar allows nothing more; with no end id to emit, the reply ends here."""
        return bool(self._matcher.is_stopped()) and self._end_ids.size == 0

    def fill_row(self, allowed: np.ndarray) -> None:
        """Turn `allowed` (one row of 0/1, the grammar's mask) into the request's mask."""
        allowed[self._grammar_eos_ids[self._grammar_eos_ids < allowed.shape[0]]] = 0
        if self._end_ids.size and self._matcher.is_accepting():
            allowed[self._end_ids] = 1

    def advance(self, token: int) -> None:
        """Feed the sampled `token`; an end id is the reply's end, not grammar text."""
        if token in self._end_set or self.error is not None:
            return
        if not self._matcher.consume_token(token):
            self.fail(f"token {token} left the grammar: {_first_line(self._matcher.get_error())}")

    def fail(self, reason: str) -> None:
        self.error = EngineError(
            f"constrained decoding failed ({self.constraint.reason}): {reason}"
        )

    def accepts_reply(self, tokens: Sequence[int]) -> tuple[int, str]:
        """Feed a whole reply (the scripted engine's check): how many tokens the grammar took
        before the first it refused (len(tokens) when all) and llguidance's reason, if any."""
        for n, token in enumerate(tokens):
            if token in self._end_set:
                if not self._matcher.is_accepting():
                    return n, "the reply ends before the grammar is complete"
                continue
            if not self._matcher.consume_token(token):
                return n, _first_line(self._matcher.get_error())
        return len(tokens), ""

    @property
    def matcher(self) -> llguidance.LLMatcher:
        return self._matcher


def allowed_tokens(grammars: Sequence[RequestGrammar], vocab_size: int) -> np.ndarray:
    """The 0/1 masks (uint8 [len(grammars), vocab_size]) of the tokens each grammar allows
    next."""
    width = max(grammar.mask_width for grammar in grammars)
    bitmask = llguidance.numpy.allocate_token_bitmask(len(grammars), width)
    for row, grammar in enumerate(grammars):
        llguidance.numpy.fill_next_token_bitmask(grammar.matcher, bitmask, row)
    # Token i is bit i % 32 of word i // 32: little-endian words unpack in token order.
    allowed = np.unpackbits(bitmask.view(np.uint8), axis=1, bitorder="little")[:, :vocab_size]
    if allowed.shape[1] < vocab_size:  # the model's padded rows: never a token of the text
        allowed = np.pad(allowed, ((0, 0), (0, vocab_size - allowed.shape[1])))
    for row, grammar in enumerate(grammars):
        grammar.fill_row(allowed[row])
        if not allowed[row].any():
            error = _first_line(grammar.matcher.get_error())
            grammar.fail(error or "no token can continue the reply")
            allowed[row] = 1  # a placeholder row: its token is dropped with the error
    return allowed
