"""Hand-made Messages generations, their stream events, and the `anthropic` SDK on a mock transport.

Bodies and events are read with the SDK's own types, and SSE text goes through its streaming
client (`client.messages.stream`) over `httpx2.MockTransport`, so that the SDK's accumulator must
rebuild the same message as the non-streamed body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from anthropic.types import Message, UserMessageParam

from rltap.protocols.anthropic_messages import ID_PREFIX, StreamEncoder, parse_request
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

USER: UserMessageParam = {"role": "user", "content": "Hi"}
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": [USER], **fields}


def make_generation(
    *,
    content: str = "",
    reasoning: str | None = None,
    calls: Sequence[tuple[str, str]] = (),
    finish: FinishReason = "stop",
    token_texts: Sequence[str] = (),
    stop_sequence: str | None = None,
    interaction_id: str = f"{ID_PREFIX}0001",
) -> Generation:
    """A generation as the session builds it: parsed output and the canonical output message."""
    tool_calls = [
        ParsedToolCall(id=f"call_{i:024x}", name=name, arguments=arguments)
        for i, (name, arguments) in enumerate(calls)
    ]
    parsed = ParsedOutput(content=content, reasoning=reasoning, tool_calls=tool_calls)
    n = 7
    stop = StopReason.LENGTH if finish == "length" else StopReason.STOP
    response = ModelResponse(
        input_tokens=list(range(5)),
        output_tokens=[11] * n,
        output_logprobs=[-0.5] * n,
        output_versions=[0] * n,
        stop_reason=StopReason.ABORT if finish == "abort" else stop,
    )
    return Generation(
        index=0,
        interaction_id=interaction_id,
        response=response,
        parsed=parsed,
        finish_reason=finish,
        output_message=assistant_message(content, reasoning, tool_calls),
        token_texts=list(token_texts),
        stop_sequence=stop_sequence,
        created=1_700_000_000.0,
    )


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def deltas_of(generation: Generation, size: int) -> list[Delta]:
    """The parser deltas of a generation, its texts cut into pieces of `size` characters."""
    parsed = generation.parsed
    deltas: list[Delta] = [ReasoningDelta(p) for p in _pieces(parsed.reasoning or "", size)]
    deltas += [ContentDelta(p) for p in _pieces(parsed.content, size)]
    for i, call in enumerate(parsed.tool_calls):
        deltas.append(ToolCallStartDelta(index=i, id=call.id, name=call.name))
        deltas += [
            ToolCallArgumentsDelta(index=i, fragment=p) for p in _pieces(call.arguments, size)
        ]
    return deltas


def stream_events(generation: Generation, deltas: Sequence[Delta]) -> list[StreamEvent]:
    start = GenerationStart(
        index=0,
        interaction_id=generation.interaction_id,
        prompt_tokens=generation.prompt_tokens,
        created=generation.created,
    )
    middle: list[StreamEvent] = [GenerationDelta(index=0, deltas=[d]) for d in deltas]
    return [start, *middle, GenerationEnd(generation=generation)]


def encode_all(request: CanonicalRequest, events: Sequence[StreamEvent]) -> list[SSEEvent]:
    return encode_stream(StreamEncoder(request), events)


def sdk_client(handler: Any) -> anthropic.AsyncAnthropic:
    http_client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return anthropic.AsyncAnthropic(
        base_url="http://t", api_key="k", http_client=http_client, max_retries=0
    )


async def sdk_stream_final(payload: bytes) -> Message:
    """What the SDK's `messages.stream(...)` accumulator rebuilds from the SSE bytes."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=payload)

    client = sdk_client(handler)
    async with client.messages.stream(model="m", max_tokens=64, messages=[USER]) as stream:
        final = await stream.get_final_message()
    return Message.model_validate(final.model_dump(exclude_none=True))


GENERATIONS = [
    pytest.param(make_generation(content="Hello there! How can I help?"), "end_turn", id="text"),
    pytest.param(
        make_generation(reasoning="The user greets me.", content="Hi!"),
        "end_turn",
        id="reasoning-text",
    ),
    pytest.param(
        make_generation(calls=[("get_weather", '{"city":"Paris"}')], finish="tool_calls"),
        "tool_use",
        id="tool-call",
    ),
    pytest.param(
        make_generation(
            reasoning="Two cities.",
            content="Checking both.",
            calls=[
                ("get_weather", '{"city":"Paris"}'),
                ("get_weather", '{"city":"Oslo","units":["C"]}'),
            ],
            finish="tool_calls",
        ),
        "tool_use",
        id="reasoning-text-two-tool-calls",
    ),
    pytest.param(
        make_generation(calls=[("noop", "{}")], finish="tool_calls"),
        "tool_use",
        id="tool-call-no-args",
    ),
    pytest.param(
        make_generation(content="Once upon a", finish="length"), "max_tokens", id="length"
    ),
    pytest.param(
        make_generation(content="1, 2, 3", stop_sequence="STOP"),
        "stop_sequence",
        id="stop-sequence",
    ),
    pytest.param(make_generation(content=""), "end_turn", id="empty"),
]


def request_for(stream: bool = False) -> CanonicalRequest:
    return parse_request(body(stop_sequences=["STOP"], stream=stream, tools=[WEATHER_TOOL]))


def as_params(history: Sequence[Any]) -> list[dict[str, Any]]:
    """SDK message params (which may hold SDK models) as plain JSON, as the client sends them."""
    result: list[dict[str, Any]] = orjson.loads(
        orjson.dumps(
            list(history),
            default=lambda model: model.model_dump(exclude_none=True),
        )
    )
    return result
