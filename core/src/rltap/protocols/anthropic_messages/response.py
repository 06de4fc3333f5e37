"""Anthropic Messages response bodies and error envelopes, from canonical generations.

Decisions where the API leaves room:

- Content blocks come in the order thinking, text, tool_use (the order a reasoning model writes
  them); empty reasoning or text makes no block.
- A `thinking` block's `signature` is the interaction id: opaque and non-empty like Anthropic's,
  and it names the recorded interaction. Signatures sent back by clients are ignored.
- A `tool_use` block's id is the tool call's id with `call_` replaced by `toolu_`; canonical
  messages ignore tool-call ids, so the client's history still matches the recorded reply.
- `stop_reason`: tool_calls -> `tool_use`, length -> `max_tokens`, stop -> `stop_sequence` (with
  the matched string) when one of the request's `stop_sequences` ended the reply (the session
  finds it and cuts the text before it, `rltap.chat.stop_strings`; the recorded output tokens
  keep it, as the engine produced it), else `end_turn`; abort -> None, since Anthropic has no
  reason for a generation rltap cancelled.
- Messages has exactly one choice: `build_response` reads the first generation only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from rltap.record.errors import RltapError, ThreadNotFound
from rltap.record.generation import CanonicalRequest, Generation

__all__ = [
    "ID_PREFIX",
    "anthropic_error_type",
    "build_response",
    "content_blocks",
    "error_body",
    "stop_reason",
    "tool_use_id",
    "tool_use_input",
]

ID_PREFIX = "msg_"
"""Prefix of the interaction ids (and so the message ids) of `/v1/messages` calls."""

_TOOL_USE_PREFIX = "toolu_"

# Anthropic's error `type` for each HTTP status rltap uses; see `anthropic_error_type`.
_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    410: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def build_response(request: CanonicalRequest, generations: list[Generation]) -> dict[str, Any]:
    """The Message body of a non-streamed call (one choice: the first generation)."""
    if not generations:
        msg = "build_response needs one generation"
        raise ValueError(msg)
    generation = generations[0]
    reason, sequence = stop_reason(generation)
    return {
        "id": generation.interaction_id,
        "type": "message",
        "role": "assistant",
        "model": request.model,
        "content": content_blocks(generation.output_message, signature=generation.interaction_id),
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": {
            "input_tokens": generation.prompt_tokens,
            "output_tokens": generation.completion_tokens,
        },
    }


def content_blocks(message: Mapping[str, Any], *, signature: str) -> list[dict[str, Any]]:
    """A canonical assistant message as Message content blocks: thinking, text, tool_use."""
    blocks: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": signature})
    text = _text_of(message.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        blocks.append(
            {
                "type": "tool_use",
                "id": tool_use_id(call["id"]),
                "name": function["name"],
                "input": tool_use_input(function["arguments"]),
            }
        )
    return blocks


def _text_of(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(part.get("text") or "" for part in content if part.get("type", "text") == "text")


def tool_use_id(call_id: str) -> str:
    """The `toolu_` id of a tool call: `call_abc` -> `toolu_abc`; `toolu_` ids are kept."""
    if call_id.startswith(_TOOL_USE_PREFIX):
        return call_id
    return _TOOL_USE_PREFIX + call_id.removeprefix("call_")


def tool_use_input(arguments: str | Mapping[str, Any]) -> dict[str, Any]:
    """A tool call's JSON arguments as the `input` object.

    The parsers only emit calls whose arguments are a JSON object; anything else (never expected)
    becomes `{}` because Anthropic's `input` must be an object.
    """
    if isinstance(arguments, Mapping):
        return dict(arguments)
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def stop_reason(generation: Generation) -> tuple[str | None, str | None]:
    """`(stop_reason, stop_sequence)` of a finished generation (see the module docstring)."""
    match generation.finish_reason:
        case "tool_calls":
            return "tool_use", None
        case "length":
            return "max_tokens", None
        case "abort":
            return None, None
    if generation.stop_sequence is not None:
        return "stop_sequence", generation.stop_sequence
    return "end_turn", None


def anthropic_error_type(exc: RltapError) -> str:
    """Anthropic's error `type` for an error, by its HTTP status."""
    known = _ERROR_TYPES.get(exc.status_code)
    if known is not None:
        return known
    return "invalid_request_error" if exc.status_code < 500 else "api_error"


def error_body(exc: RltapError) -> dict[str, Any]:
    """The Anthropic error envelope: `{"type": "error", "error": {"type", "message"}}`, and
    `details: {"error_code"}` for a thread error (the SDK's threads recover on its code)."""
    error: dict[str, Any] = {"type": anthropic_error_type(exc), "message": exc.message}
    if isinstance(exc, ThreadNotFound):
        error["details"] = {"error_code": exc.code}
    return {"type": "error", "error": error}
