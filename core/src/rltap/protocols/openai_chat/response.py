"""Chat Completions response bodies: `chat.completion`, the error envelope, logprobs.

Finish reasons: the session's `stop`, `length` and `tool_calls` pass through; `abort` (the engine
gave up before the model ended its reply) becomes `length`, since Chat Completions has no
`abort` and `length` is the reason that tells a client "this reply was cut short", where `stop`
would claim a complete one.

Logprobs are the recorded logprob of every sampled output token (reasoning, tool-call markup and
the end-of-turn token included: they are the tokens trained on). rltap records only the sampled
token's logprob, so `top_logprobs`, when asked for, holds just that token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from rltap.record.errors import RltapError
from rltap.record.generation import CanonicalRequest, FinishReason, Generation

__all__ = [
    "ID_PREFIX",
    "build_response",
    "error_body",
    "logprob_entries",
    "usage",
    "wire_finish_reason",
]

ID_PREFIX = "chatcmpl-"
"""Prefix of Chat Completions interaction ids (and so of response ids)."""

WireFinishReason = Literal["stop", "length", "tool_calls"]

# OpenAI's stand-in for "very unlikely"; JSON has no -Infinity.
_MIN_LOGPROB = -9999.0


def wire_finish_reason(reason: FinishReason) -> WireFinishReason:
    """The Chat Completions `finish_reason` of a generation's finish reason."""
    return "length" if reason == "abort" else reason


def logprob_entries(
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    token_texts: Sequence[str],
    top_logprobs: int | None,
) -> list[dict[str, Any]]:
    """`logprobs.content` entries, one per token.

    A token whose text is unknown is written `token_id:<id>` (vLLM's spelling); a logprob that is
    not finite is written -9999.0.
    """
    entries: list[dict[str, Any]] = []
    for i, (token_id, logprob) in enumerate(zip(token_ids, logprobs, strict=True)):
        text = token_texts[i] if i < len(token_texts) else f"token_id:{token_id}"
        value = logprob if math.isfinite(logprob) else _MIN_LOGPROB
        token_bytes = list(text.encode("utf-8"))
        top = [{"token": text, "logprob": value, "bytes": token_bytes}] if top_logprobs else []
        entries.append({"token": text, "logprob": value, "bytes": token_bytes, "top_logprobs": top})
    return entries


def _message(generation: Generation) -> dict[str, Any]:
    source = generation.output_message
    message: dict[str, Any] = {
        "role": "assistant",
        "content": source.get("content"),
        "refusal": None,
    }
    if source.get("tool_calls"):
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                },
            }
            for call in source["tool_calls"]
        ]
    if source.get("reasoning_content") is not None:
        message["reasoning_content"] = source["reasoning_content"]
    return message


def _choice(request: CanonicalRequest, generation: Generation) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": generation.index,
        "message": _message(generation),
        "finish_reason": wire_finish_reason(generation.finish_reason),
        "logprobs": None,
    }
    if request.logprobs:
        response = generation.response
        content = logprob_entries(
            response.output_tokens,
            response.output_logprobs,
            generation.token_texts,
            request.top_logprobs,
        )
        choice["logprobs"] = {"content": content, "refusal": None}
    if request.n > 1:
        # Every choice is its own interaction; the client needs each id to reward it.
        choice["interaction_id"] = generation.interaction_id
    return choice


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The `usage` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def build_response(request: CanonicalRequest, generations: list[Generation]) -> dict[str, Any]:
    """The `chat.completion` body for the finished choices of `request`.

    `id` and `created` are those of choice 0; `usage.completion_tokens` sums every choice and
    `usage.prompt_tokens` counts the prompt once (the choices share it).
    """
    if not generations:
        msg = "build_response needs at least one generation"
        raise ValueError(msg)
    ordered = sorted(generations, key=lambda g: g.index)
    first = ordered[0]
    return {
        "id": first.interaction_id,
        "object": "chat.completion",
        "created": int(first.created),
        "model": request.model,
        "choices": [_choice(request, g) for g in ordered],
        "usage": usage(first.prompt_tokens, sum(g.completion_tokens for g in ordered)),
        "system_fingerprint": None,
    }


def error_body(exc: RltapError) -> dict[str, Any]:
    """The Chat Completions error envelope: `{"error": {"message", "type", "param", "code"}}`."""
    return {
        "error": {
            "message": exc.message,
            "type": exc.error_type,
            "param": exc.param,
            "code": exc.code,
        }
    }
