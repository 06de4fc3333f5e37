"""Per-request token sampling and stop criteria, shared by the embedded engines.

Every request samples with its own `torch.Generator`, so a seeded request draws the same random
numbers whatever else is in the batch, and the recorded logprob is log_softmax(logits / T) of the
sampled token, before top-k/top-p filtering (`LogprobConvention.TEMPERATURE_SCALED`). A
constrained row's grammar mask is one more filter, applied before top-k/top-p (as vLLM does): it
shapes what is sampled, never the recorded logprob; unconstrained rows are computed exactly as
in a batch without masks.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from rltap.engines._grammar import RequestGrammar, allowed_tokens
from rltap.record.types import ModelRequest, StopReason

__all__ = [
    "MaskWorker",
    "RowMasks",
    "RowSampler",
    "StopCriteria",
    "grammar_masks",
    "sample_rows",
]


@dataclass(slots=True)
class RowSampler:
    """How one request picks its next token."""

    temperature: float  # the T logits are divided by; 1.0 for temperature-0 greedy decoding
    greedy: bool
    top_k: int
    top_p: float
    generator: torch.Generator | None

    @classmethod
    def for_request(cls, request: ModelRequest, device: torch.device) -> RowSampler:
        """Temperature 0 or top-k 1 decode greedily (argmax); otherwise a seeded generator."""
        greedy = request.greedy
        generator = None
        if not greedy:
            generator = torch.Generator(device=device)
            seed = request.seed if request.seed is not None else secrets.randbits(63)
            generator.manual_seed(seed)
        temperature = request.temperature if request.temperature > 0 else 1.0
        return cls(temperature, greedy, request.top_k, request.top_p, generator)


# The tokens each constrained row may sample: row index -> uint8 [V] (1 = allowed).
RowMasks = Mapping[int, torch.Tensor]


def sample_rows(
    logits: torch.Tensor, samplers: Sequence[RowSampler], masks: RowMasks | None = None
) -> tuple[list[int], list[float]]:
    """Pick one token per row of `logits` [B, V]; return the tokens and their logprobs.

    The logprob is log_softmax(logits / T)[token]; filtering (`masks`, top-k, top-p) only
    shapes what is sampled.
    """
    logits = logits.float()
    scaled = logits
    if any(s.temperature != 1.0 for s in samplers):
        temps = [s.temperature for s in samplers]
        scaled = logits / torch.tensor(temps, dtype=logits.dtype, device=logits.device)[:, None]
    # log_softmax, not logits - logsumexp: the two round differently (~1e-5 on a 150k
    # vocabulary), and trainers recompute logprobs with log_softmax.
    logp = torch.log_softmax(scaled, dim=-1)
    masks = masks or {}
    tokens = [0] * len(samplers)
    greedy = [i for i, s in enumerate(samplers) if s.greedy and i not in masks]
    if greedy:
        for i, token in zip(greedy, scaled[greedy].argmax(dim=-1).tolist(), strict=True):
            tokens[i] = int(token)
    for i, allowed in masks.items():
        if samplers[i].greedy:  # argmax is slow on CPU: one per row, over the allowed only
            tokens[i] = _masked_argmax(scaled[i], logp[i], allowed)
    sampled = [i for i, s in enumerate(samplers) if not s.greedy]
    if sampled:
        picks = _sample(
            scaled[sampled],
            logp[sampled],
            [samplers[i] for i in sampled],
            [masks.get(i) for i in sampled],
        )
        for i, token in zip(sampled, picks, strict=True):
            tokens[i] = token
    index = torch.tensor(tokens, device=logits.device)
    picked = logp.gather(1, index[:, None]).squeeze(1)
    return tokens, [float(x) for x in picked.tolist()]


def grammar_masks(grammars: Sequence[RequestGrammar | None], vocab_size: int) -> RowMasks | None:
    """The masks of the rows that have a grammar (None when none has: no extra cost)."""
    rows = [i for i, grammar in enumerate(grammars) if grammar is not None]
    if not rows:
        return None
    constrained = [grammar for grammar in grammars if grammar is not None]
    allowed = torch.from_numpy(allowed_tokens(constrained, vocab_size))
    return {row: allowed[n] for n, row in enumerate(rows)}


class MaskWorker:
    """Computes a step's grammar masks on a thread of its own while the model runs the step's
    forward pass (llguidance releases the GIL), so the masks cost little wall time."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def submit(
        self, grammars: Sequence[RequestGrammar | None], vocab_size: int
    ) -> Future[RowMasks | None] | None:
        """Start `grammar_masks` (None when no row has a grammar: no thread is involved)."""
        if all(grammar is None for grammar in grammars):
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rltap-grammar")
        return self._pool.submit(grammar_masks, list(grammars), vocab_size)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def _allowed_weights(row_scaled: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """exp(scaled - max over the allowed tokens), 0 where blocked: never all zero."""
    masked = row_scaled.masked_fill(allowed.to(row_scaled.device) == 0, -torch.inf)
    return (masked - masked.max()).exp()


def _masked_argmax(row_scaled: torch.Tensor, row_logp: torch.Tensor, allowed: torch.Tensor) -> int:
    weights = row_logp.exp().mul_(allowed.to(row_logp.device))
    token = int(weights.argmax())
    if weights[token] > 0:
        return token
    return int(_allowed_weights(row_scaled, allowed).argmax())  # every allowed one underflowed


def _filter_row(probs: torch.Tensor, source: torch.Tensor, sampler: RowSampler) -> None:
    """Top-k then top-p on one row of weights, in place; `source` orders the tokens."""
    if 0 < sampler.top_k < probs.shape[0]:
        kth = torch.topk(source, sampler.top_k).values[-1]
        probs.masked_fill_(source < kth, 0.0)
    if sampler.top_p < 1.0:
        probs.copy_(_top_p_filter(probs, sampler.top_p))


def _sample(
    scaled: torch.Tensor,
    logp: torch.Tensor,
    samplers: Sequence[RowSampler],
    masks: Sequence[torch.Tensor | None],
) -> list[int]:
    """Inverse-CDF sampling: one uniform draw per row from that row's own generator.

    (torch.multinomial over a 150k vocabulary costs ~10x more on CPU and draws a
    vocabulary-dependent amount of randomness.) A constrained row's weights are its
    probabilities times its 0/1 mask: one multiply, the CDF needs no normalising.
    """
    probs = logp.exp()
    for row, (sampler, allowed) in enumerate(zip(samplers, masks, strict=True)):
        if allowed is not None:
            probs[row].mul_(allowed.to(probs.device))
        # A constrained row's probs order its allowed tokens as the logits do.
        _filter_row(probs[row], scaled[row] if allowed is None else probs[row], sampler)
    cdf = probs.double().cumsum(dim=-1)
    totals = cdf[:, -1].tolist() if any(m is not None for m in masks) else []
    for row, allowed in enumerate(masks):
        if allowed is not None and totals[row] == 0:
            # Every allowed token underflowed in exp(logp): weigh them from their own max.
            weights = _allowed_weights(scaled[row], allowed)
            _filter_row(weights, weights, samplers[row])
            cdf[row] = weights.double().cumsum(dim=-1)
    total = cdf[:, -1]
    draws = torch.cat(
        [
            torch.rand(1, generator=s.generator, dtype=torch.float64, device=probs.device)
            for s in samplers
        ]
    )
    # u < total strictly, so the first cdf entry above u is a token with nonzero probability.
    u = torch.minimum(draws * total, torch.nextafter(total, torch.zeros_like(total)))
    picks = torch.searchsorted(cdf, u[:, None], right=True).squeeze(1)
    return [int(x) for x in picks.tolist()]


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_probs, order = torch.sort(probs, descending=True)
    mass = sorted_probs.sum()
    cumulative = sorted_probs.cumsum(0) / mass
    # Keep the smallest prefix whose mass reaches top_p (the most likely token always stays).
    keep = (cumulative - sorted_probs / mass) < top_p
    filtered = torch.zeros_like(probs)
    filtered[order[keep]] = probs[order[keep]]
    return filtered


class StopCriteria:
    """Decides, token by token, whether a sequence is finished and why.

    Stop token ids and stop strings end with `StopReason.STOP` (the token that completes a stop
    string is the last one emitted; cutting the string out of the text is the renderer's job);
    `max_new_tokens` or the context limit end with `StopReason.LENGTH`.
    """

    def __init__(
        self,
        *,
        prompt_len: int,
        max_new_tokens: int,
        context_limit: int,
        stop_token_ids: Sequence[int] = (),
        stop_strings: Sequence[str] = (),
        tokenizer: Any = None,
    ) -> None:
        self._prompt_len = prompt_len
        self._max_new_tokens = max_new_tokens
        self._context_limit = context_limit
        self._stop_ids = frozenset(stop_token_ids)
        self._stop_strings = tuple(s for s in stop_strings if s)
        self._longest = max((len(s) for s in self._stop_strings), default=0)
        self._tokenizer = tokenizer
        self._scanned = 0  # characters of output text already searched for stop strings

    @property
    def stop_token_ids(self) -> frozenset[int]:
        return self._stop_ids

    def check(self, output_ids: Sequence[int]) -> StopReason | None:
        """The stop reason after the last token of `output_ids`, or None to keep going."""
        if output_ids and output_ids[-1] in self._stop_ids:
            return StopReason.STOP
        if self._stop_strings and self._has_stop_string(output_ids):
            return StopReason.STOP
        if len(output_ids) >= self._max_new_tokens:
            return StopReason.LENGTH
        if self._prompt_len + len(output_ids) >= self._context_limit:
            return StopReason.LENGTH
        return None

    def _has_stop_string(self, output_ids: Sequence[int]) -> bool:
        text: str = self._tokenizer.decode(list(output_ids), skip_special_tokens=True)
        # A match must end in the new text; the last few old characters may still change (an
        # incomplete UTF-8 sequence decodes to U+FFFD until its last byte arrives).
        start = max(0, self._scanned - self._longest - 3)
        self._scanned = len(text)
        return any(text.find(s, start) >= 0 for s in self._stop_strings)
