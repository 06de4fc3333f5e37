"""What a session takes and gives, whatever wire API a call came through.

`CanonicalRequest` is the one request form (OpenAI-chat-style canonical messages and tools) every
protocol converts its body into; `Generation` is one finished choice and `StreamEvent` what a
session yields while tokens arrive. The protocols (`rltap.protocols`) build their API's bodies and
events from these; the session (`rltap.session.session`) never sees a wire format.

Canonical messages are OpenAI Chat Completions message dicts:
    {"role": "system" | "user" | "assistant" | "tool", "content": str | list[part] | None,
     "tool_calls": [{"id", "type": "function", "function": {"name", "arguments": json str}}],
     "tool_call_id": str, "name": str, "reasoning_content": str}
Canonical tools are Chat Completions tools: {"type": "function", "function": {"name",
"description", "parameters"}}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rltap.record.errors import InvalidRequest
from rltap.record.parsed import Delta, ParsedOutput
from rltap.record.types import ModelResponse

__all__ = [
    "Api",
    "CanonicalRequest",
    "FinishReason",
    "Generation",
    "GenerationDelta",
    "GenerationEnd",
    "GenerationStart",
    "StreamEvent",
    "ToolChoice",
    "UnsupportedContent",
]

# The name of a registered wire API (`rltap.protocols.SPECS`): "chat", "responses", "messages".
Api = str
FinishReason = Literal["stop", "length", "tool_calls", "abort"]
# "auto", "none", "required", or {"name": function_name} for a named function.
ToolChoice = str | dict[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class UnsupportedContent:
    """A content part the model cannot take (an image, audio, a file), taken out of the
    canonical messages: its `type` and its path in the request (`messages[1].content[0]`)."""

    type: str
    param: str

    def error(self) -> InvalidRequest:
        """The 400 that refuses the request for this part."""
        msg = (
            f"content of type {self.type!r} at {self.param} is not supported: this model reads "
            "text only (a server started with --drop-unsupported-content drops such parts)"
        )
        return InvalidRequest(msg, param=self.param)


@dataclass(slots=True, kw_only=True)
class CanonicalRequest:
    """One generation request in canonical form, whatever API it came from.

    `max_tokens` None means "as many as the context allows". `n` > 1 asks for n sibling
    interactions. `previous_response_id` (Responses API) names a response of the same session
    whose conversation precedes `messages`.
    """

    api: Api
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    # The reply's required shape, canonical for every API: None (free text),
    # {"type": "json_object"}, or {"type": "json_schema", "name": str, "schema": dict,
    # "strict": bool}.
    response_format: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    previous_response_id: str | None = None
    # Anthropic `thread: {"type": "continue"}`: `previous_response_id` is the message it continues,
    # whose tools carry over (the client sends none: the thread holds them).
    continues_thread: bool = False
    # Parts the protocol took out of `messages` because the model cannot take them; the session
    # refuses the request for them unless its config drops them (`rltap.protocols._content`).
    unsupported_content: list[UnsupportedContent] = field(default_factory=list)
    # Responses `instructions`: a system message before the conversation, for this call only
    # (a call that continues it by `previous_response_id` does not carry it over, as OpenAI).
    instructions: str | None = None
    # Settings the reply object repeats back as sent (Responses `reasoning`, `text`), by their
    # wire names; read by the protocol's response builder only.
    echo: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    # The agent that made the call, as the client names it (the `X-Rltap-Agent` header); None:
    # derived from the system prompt and tools (`rltap.tree.links`).
    agent: str | None = None
    # The call rewrites the conversation it carries (a compaction: the model summarises it to
    # stand in for it): linked `rewrite` to it, by its agent, whatever its own prompt says.
    rewrites: bool = False


@dataclass(slots=True, kw_only=True)
class Generation:
    """One finished choice: the engine's tokens, the parsed reply and the message it becomes."""

    index: int
    interaction_id: str
    response: ModelResponse
    parsed: ParsedOutput
    finish_reason: FinishReason
    output_message: dict[str, Any]
    # The request's stop string that ended the reply (finish_reason "stop"), if one did.
    stop_sequence: str | None = None
    # Decoded text of each output token, for the logprobs fields of the wire formats.
    token_texts: list[str] = field(default_factory=list)
    created: float = 0.0
    # The output token limit applied (the request's, or the server's default; cut to the context
    # left), None where not known.
    max_tokens: int | None = None

    @property
    def prompt_tokens(self) -> int:
        return self.response.input_len

    @property
    def completion_tokens(self) -> int:
        return self.response.output_len


@dataclass(slots=True, kw_only=True)
class GenerationStart:
    """A choice started: its interaction exists and tokens are on their way."""

    index: int
    interaction_id: str
    prompt_tokens: int
    created: float
    max_tokens: int | None = None  # as `Generation.max_tokens`


@dataclass(slots=True, kw_only=True)
class GenerationDelta:
    """One engine chunk of a choice, as soon as the engine produced it.

    `deltas` is what the streaming parser released for these tokens (possibly nothing while it
    holds back a possible tag prefix, possibly text of earlier tokens released now).
    """

    index: int
    deltas: list[Delta]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class GenerationEnd:
    """A choice finished; `generation` holds everything the non-streaming body would."""

    generation: Generation


StreamEvent = GenerationStart | GenerationDelta | GenerationEnd
