"""Responses bodies: the `response` object, its output items, usage and the error envelope.

Output items, in this order: a `reasoning` item (the reasoning text as one `reasoning_text`
content part) when the reply has reasoning; a `message` item with one
`output_text` part when it has text, or when it has nothing else (so that the client's history
still holds the turn); one `function_call` item per tool call (`call_id` is the tool-call id).
Item ids are derived from the response id and the item's position (`msg_<id>_1`), so a stream and
its final `response` name the same items.

A reasoning item's `summary` is empty unless the request asks for one (`reasoning.summary`:
`auto`, `concise` or `detailed`); then it is one `summary_text` part holding the reasoning text
itself. rltap runs no second model to summarise: the model's own reasoning, which it wrote for
the reader anyway, is its summary, whatever the level asked for.

Status: `stop` and `tool_calls` -> `completed`; `length` -> `incomplete` with
`incomplete_details.reason = "max_output_tokens"`; `abort` -> `cancelled`. The text items of a
response that did not complete are `incomplete`; function calls are always complete (a call is
only reported once its JSON has been parsed whole).

Usage reports `reasoning_tokens: 0` and `cached_tokens: 0`: rltap records which tokens were
generated, not which of them were reasoning, and re-used prefix tokens are not a cache hit the
API's way. Logprobs (asked for with `include: ["message.output_text.logprobs"]`) are the recorded
logprob of every sampled output token, attached to the message's `output_text`; `top_logprobs`
holds just the sampled token, the only one rltap records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from rltap.record.errors import CapacityExhausted, InvalidRequest, RltapError
from rltap.record.generation import CanonicalRequest, FinishReason, Generation

__all__ = [
    "ID_PREFIX",
    "ItemStatus",
    "ResponseStatus",
    "build_response",
    "function_call_item",
    "item_id",
    "logprob_entries",
    "message_item",
    "output_items",
    "output_text_part",
    "reasoning_item",
    "response_error",
    "response_object",
    "response_status",
    "usage",
    "wants_summary",
]

ID_PREFIX = "resp_"
"""Prefix of Responses interaction ids (and so of response ids)."""

ResponseStatus = Literal["in_progress", "completed", "incomplete", "cancelled", "failed"]
ItemStatus = Literal["in_progress", "completed", "incomplete"]

# OpenAI's stand-in for "very unlikely"; JSON has no -Infinity.
_MIN_LOGPROB = -9999.0
_ITEM_PREFIX = {"reasoning": "rs", "message": "msg", "function_call": "fc"}


def item_id(response_id: str, kind: str, output_index: int) -> str:
    """The id of the output item at `output_index`: `msg_<response id without resp_>_<index>`."""
    return f"{_ITEM_PREFIX[kind]}_{response_id.removeprefix(ID_PREFIX)}_{output_index}"


def response_status(reason: FinishReason) -> ResponseStatus:
    """The `response.status` of a generation's finish reason."""
    if reason == "length":
        return "incomplete"
    if reason == "abort":
        return "cancelled"
    return "completed"


def logprob_entries(token_texts: Sequence[str], logprobs: Sequence[float]) -> list[dict[str, Any]]:
    """`output_text.logprobs` entries, one per output token whose text is known."""
    entries: list[dict[str, Any]] = []
    for text, logprob in zip(token_texts, logprobs, strict=False):
        value = logprob if math.isfinite(logprob) else _MIN_LOGPROB
        token_bytes = list(text.encode("utf-8"))
        top = [{"token": text, "logprob": value, "bytes": token_bytes}]
        entries.append({"token": text, "logprob": value, "bytes": token_bytes, "top_logprobs": top})
    return entries


def output_text_part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An `output_text` content part (no annotations: rltap does no citations)."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def wants_summary(request: CanonicalRequest) -> bool:
    """Whether the request asked for reasoning summaries (`reasoning.summary`)."""
    reasoning = request.echo.get("reasoning") or {}
    return reasoning.get("summary") is not None


def reasoning_item(
    id_: str, text: str | None, status: ItemStatus, *, content: bool = True, summary: bool = False
) -> dict[str, Any]:
    """A `reasoning` item; `content=False` gives the empty item a stream announces first;
    `summary=True` repeats the text as its summary (the module docstring says why)."""
    parts = [{"type": "reasoning_text", "text": text or ""}] if content else []
    summaries = [{"type": "summary_text", "text": text or ""}] if content and summary else []
    return {
        "type": "reasoning",
        "id": id_,
        "summary": summaries,
        "content": parts,
        "status": status,
    }


def message_item(
    id_: str, text: str | None, status: ItemStatus, *, logprobs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An assistant `message` item; `text=None` gives the empty item a stream announces first."""
    content = [] if text is None else [output_text_part(text, logprobs)]
    return {"type": "message", "id": id_, "role": "assistant", "status": status, "content": content}


def function_call_item(
    id_: str, call_id: str, name: str, arguments: str, status: ItemStatus
) -> dict[str, Any]:
    """A `function_call` item."""
    return {
        "type": "function_call",
        "id": id_,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def usage(generation: Generation) -> dict[str, Any]:
    """The `usage` object of a finished generation."""
    return {
        "input_tokens": generation.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": generation.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": generation.prompt_tokens + generation.completion_tokens,
    }


def _wire_tools(request: CanonicalRequest) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for tool in request.tools or []:
        function = tool["function"]
        tools.append(
            {
                "type": "function",
                "name": function["name"],
                "description": function.get("description"),
                "parameters": function.get("parameters"),
                "strict": function.get("strict"),
            }
        )
    return tools


def _wire_tool_choice(request: CanonicalRequest) -> str | dict[str, Any]:
    choice = request.tool_choice
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    return {"type": "function", "name": choice["name"]}


def response_object(
    request: CanonicalRequest,
    *,
    response_id: str,
    created: float,
    status: ResponseStatus,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    completed_at: float | None = None,
    error: dict[str, Any] | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """A `response` object echoing the request's settings, as the SDK's `Response` requires;
    `max_tokens` is the output limit applied (the server's default when the request set none),
    echoed as OpenAI does."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(created),
        "status": status,
        "completed_at": None if completed_at is None else int(completed_at),
        "error": error,
        "incomplete_details": incomplete,
        "instructions": request.instructions,
        "max_output_tokens": request.max_tokens if max_tokens is None else max_tokens,
        "model": request.model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls,
        "previous_response_id": request.previous_response_id,
        "reasoning": request.echo.get("reasoning"),
        "temperature": request.temperature,
        "top_p": request.top_p,
        "top_logprobs": request.top_logprobs,
        "text": request.echo.get("text", {"format": {"type": "text"}}),
        "tool_choice": _wire_tool_choice(request),
        "tools": _wire_tools(request),
        "truncation": "disabled",
        "usage": usage,
        "metadata": dict(request.metadata),
        "user": None,
        "conversation": request.echo.get("conversation"),
    }


def output_items(request: CanonicalRequest, generation: Generation) -> list[dict[str, Any]]:
    """The output items of a finished generation, in the module docstring's order."""
    response_id = generation.interaction_id
    message = generation.output_message
    text_status: ItemStatus = (
        "completed" if response_status(generation.finish_reason) == "completed" else "incomplete"
    )
    items: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    content = message.get("content") or ""
    calls = message.get("tool_calls") or []
    if reasoning:
        # As in a stream: reasoning that text or a call followed was finished.
        status: ItemStatus = "completed" if content or calls else text_status
        id_ = item_id(response_id, "reasoning", 0)
        items.append(reasoning_item(id_, reasoning, status, summary=wants_summary(request)))
    if content or not (items or calls):
        logprobs = _logprobs(request, generation)
        id_ = item_id(response_id, "message", len(items))
        items.append(message_item(id_, content, text_status, logprobs=logprobs))
    for call in calls:
        function = call["function"]
        id_ = item_id(response_id, "function_call", len(items))
        items.append(
            function_call_item(
                id_, call["id"], function["name"], function["arguments"], "completed"
            )
        )
    return items


def _logprobs(request: CanonicalRequest, generation: Generation) -> list[dict[str, Any]] | None:
    if not request.logprobs:
        return None
    return logprob_entries(generation.token_texts, generation.response.output_logprobs)


def build_response(request: CanonicalRequest, generations: list[Generation]) -> dict[str, Any]:
    """The `response` body of a non-streamed request (Responses has one generation per call)."""
    if not generations:
        msg = "build_response needs one generation"
        raise ValueError(msg)
    generation = generations[0]
    status = response_status(generation.finish_reason)
    return response_object(
        request,
        response_id=generation.interaction_id,
        created=generation.created,
        status=status,
        output=output_items(request, generation),
        usage=usage(generation),
        completed_at=(
            generation.created + generation.response.latency if status == "completed" else None
        ),
        max_tokens=generation.max_tokens,
    )


def response_error(exc: RltapError) -> dict[str, Any]:
    """The `error` of a failed `response` (its `code` is one of the API's fixed values)."""
    if isinstance(exc, CapacityExhausted):
        code = "rate_limit_exceeded"
    elif isinstance(exc, InvalidRequest):
        code = "invalid_prompt"
    else:
        code = "server_error"
    return {"code": code, "message": exc.message}
