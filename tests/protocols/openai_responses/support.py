"""Hand-made Responses generations, their stream events, and the official SDK on a mock transport.

`CASES` name the replies every test runs over (text, reasoning, tool calls, length, abort...);
`make_generation` builds one, `stream_events` the session's events that release it in pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx2
import openai
import pytest

from rltap.protocols import openai_responses as proto
from rltap.protocols.sse import SSEEvent
from rltap.record.generation import (
    CanonicalRequest,
    FinishReason,
    Generation,
    GenerationDelta,
    GenerationEnd,
    GenerationStart,
    StreamEvent,
)
from rltap.record.parsed import (
    ContentDelta,
    Delta,
    ParsedOutput,
    ParsedToolCall,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
)
from rltap.record.types import ModelResponse, StopReason

from ..wire import assistant_message, encode_stream

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}
CREATED = 1_700_000_000.0


def make_generation(
    *,
    content: str = "",
    reasoning: str | None = None,
    calls: Sequence[tuple[str, str, str]] = (),
    finish: FinishReason = "stop",
    interaction_id: str = "resp_0123abcd",
    n_out: int = 6,
) -> Generation:
    stop = {"length": StopReason.LENGTH, "abort": StopReason.ABORT}.get(finish, StopReason.STOP)
    response = ModelResponse(
        input_tokens=[1, 2, 3, 4, 5],
        output_tokens=list(range(10, 10 + n_out)),
        output_logprobs=[-0.25] * n_out,
        output_versions=[3] * n_out,
        stop_reason=stop,
        latency=0.5,
    )
    tool_calls = [ParsedToolCall(id=c, name=n, arguments=a) for c, n, a in calls]
    return Generation(
        index=0,
        interaction_id=interaction_id,
        response=response,
        parsed=ParsedOutput(content=content, reasoning=reasoning, tool_calls=tool_calls),
        finish_reason=finish,
        output_message=assistant_message(content, reasoning, tool_calls),
        token_texts=[f"t{i}" for i in range(n_out)],
        created=CREATED,
    )


CASES: dict[str, dict[str, Any]] = {
    "text": {"content": "It is sunny in Paris."},
    "reasoning-text": {"reasoning": "The user wants weather.", "content": "Sunny."},
    "tool-call": {
        "calls": [("call_1", "get_weather", '{"city": "Paris"}')],
        "finish": "tool_calls",
    },
    "text-reasoning-two-calls": {
        "reasoning": "Two cities.",
        "content": "Let me check both.",
        "calls": [("call_1", "get_weather", '{"city": "Paris"}'), ("call_2", "f", "{}")],
        "finish": "tool_calls",
    },
    "length": {"content": "It is sunny and", "finish": "length"},
    "length-in-reasoning": {"reasoning": "Hmm, let me", "finish": "length"},
    "empty": {},
    "abort": {"content": "Sun", "finish": "abort"},
}
CASE_PARAMS = [pytest.param(kwargs, id=name) for name, kwargs in CASES.items()]


def request_for(**overrides: Any) -> CanonicalRequest:
    body = {"model": "qwen", "input": "Weather in Paris?", "tools": [WEATHER_TOOL], **overrides}
    return proto.parse_request(body)


def split(text: str, pieces: int = 2) -> list[str]:
    cut = max(1, len(text) // pieces)
    return [text[i : i + cut] for i in range(0, len(text), cut)]


def stream_events(generation: Generation) -> list[StreamEvent]:
    """The session's events for a generation: reasoning, text, then calls, in small pieces."""
    deltas: list[Delta] = []
    message = generation.output_message
    deltas += [ReasoningDelta(p) for p in split(message.get("reasoning_content") or "")]
    deltas += [ContentDelta(p) for p in split(message.get("content") or "")]
    for i, call in enumerate(message.get("tool_calls") or []):
        deltas.append(ToolCallStartDelta(i, call["id"], call["function"]["name"]))
        deltas += [ToolCallArgumentsDelta(i, p) for p in split(call["function"]["arguments"])]
    start = GenerationStart(
        index=0, interaction_id=generation.interaction_id, prompt_tokens=5, created=CREATED
    )
    chunks = [GenerationDelta(index=0, deltas=[d]) for d in deltas]
    return [
        start,
        GenerationDelta(index=0, deltas=[]),
        *chunks,
        GenerationEnd(generation=generation),
    ]


def encode_all(request: CanonicalRequest, events: Sequence[StreamEvent]) -> list[SSEEvent]:
    return encode_stream(proto.StreamEncoder(request), events)


def sdk_client(
    handler: Callable[[httpx2.Request], httpx2.Response], max_retries: int = 2
) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return openai.AsyncOpenAI(
        base_url="http://t/v1", api_key="k", http_client=http, max_retries=max_retries
    )


def resent_history(output: list[Any]) -> list[dict[str, Any]]:
    """What an SDK client sends next: the question, the reply's items, one output per call."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    items += [item.model_dump(exclude_none=True) for item in output]
    items += [
        {"type": "function_call_output", "call_id": item.call_id, "output": "18C"}
        for item in output
        if item.type == "function_call"
    ]
    return items
