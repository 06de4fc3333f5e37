"""Hand-made Chat Completions generations, and the official SDK over a mock transport.

A `Scenario` is a reply as the output parser released it, one list of deltas per engine chunk of
two tokens; `events_of` turns it into the session's stream events and `generation_of` into the
finished `Generation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
import pytest

from rltap.protocols import openai_chat as proto
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
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStartDelta,
    fold_deltas,
)
from rltap.record.types import ModelResponse, StopReason

from ..wire import encode_stream

USER = {"role": "user", "content": "hi"}
PROMPT_LEN = 7
CREATED = 1_700_000_000.75


@dataclass
class Scenario:
    """A reply as the parser released it: one list of deltas per engine chunk of 2 tokens."""

    steps: list[list[Delta]]
    finish: FinishReason


SCENARIOS = [
    pytest.param(
        Scenario(
            [[ContentDelta("Hel")], [ContentDelta("lo")], [ContentDelta(" world")], []], "stop"
        ),
        id="text",
    ),
    pytest.param(
        Scenario(
            [[ReasoningDelta("think")], [], [ReasoningDelta(" more")], [ContentDelta("42")]],
            "stop",
        ),
        id="reasoning-text",
    ),
    pytest.param(
        Scenario(
            [
                [ToolCallStartDelta(0, "call_a", "get_weather")],
                [ToolCallArgumentsDelta(0, '{"city": ')],
                [ToolCallArgumentsDelta(0, '"Paris"}')],
                [],
            ],
            "tool_calls",
        ),
        id="tool-call",
    ),
    pytest.param(
        Scenario(
            [
                [ReasoningDelta("two calls"), ContentDelta("Let me "), ContentDelta("check.")],
                [ToolCallStartDelta(0, "call_a", "get_weather")],
                [ToolCallArgumentsDelta(0, '{"city": "Paris"}')],
                [ToolCallStartDelta(1, "call_b", "get_time"), ToolCallArgumentsDelta(1, "{}")],
            ],
            "tool_calls",
        ),
        id="text-two-tool-calls",
    ),
    pytest.param(Scenario([[ContentDelta("cut")], [ContentDelta(" off")]], "length"), id="length"),
]


def output_message(deltas: list[Delta]) -> dict[str, Any]:
    """The canonical assistant message, as the session builds it."""
    parsed = fold_deltas(deltas)
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        message["content"] = parsed.content or None
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in parsed.tool_calls
        ]
    if parsed.reasoning is not None:
        message["reasoning_content"] = parsed.reasoning
    return message


def events_of(scenario: Scenario, index: int = 0) -> list[StreamEvent]:
    """The session's events for one choice: start, one delta per step, end."""
    interaction_id = f"{proto.ID_PREFIX}{index}"
    events: list[StreamEvent] = [
        GenerationStart(
            index=index, interaction_id=interaction_id, prompt_tokens=PROMPT_LEN, created=CREATED
        )
    ]
    all_deltas: list[Delta] = []
    ids: list[int] = []
    for step, deltas in enumerate(scenario.steps):
        tokens = [100 * index + 2 * step, 100 * index + 2 * step + 1]
        ids += tokens
        all_deltas += deltas
        events.append(
            GenerationDelta(
                index=index,
                deltas=deltas,
                token_ids=tokens,
                logprobs=[-0.5 * t for t in tokens],
                token_texts=[f"t{t}" for t in tokens],
            )
        )
    stop = StopReason.LENGTH if scenario.finish == "length" else StopReason.STOP
    response = ModelResponse(
        input_tokens=list(range(PROMPT_LEN)),
        output_tokens=ids,
        output_logprobs=[-0.5 * t for t in ids],
        output_versions=[3] * len(ids),
        stop_reason=stop,
    )
    generation = Generation(
        index=index,
        interaction_id=interaction_id,
        response=response,
        parsed=fold_deltas(all_deltas),
        finish_reason=scenario.finish,
        output_message=output_message(all_deltas),
        token_texts=[f"t{t}" for t in ids],
        created=CREATED,
    )
    events.append(GenerationEnd(generation=generation))
    return events


def generation_of(scenario: Scenario, index: int = 0) -> Generation:
    end = events_of(scenario, index)[-1]
    assert isinstance(end, GenerationEnd)
    return end.generation


def request(**overrides: Any) -> CanonicalRequest:
    return proto.parse_request({"model": "m", "messages": [USER], **overrides})


def encode_all(req: CanonicalRequest, events: Sequence[StreamEvent]) -> list[SSEEvent]:
    return encode_stream(proto.StreamEncoder(req), events)


def sdk_client(body: bytes, content_type: str = "text/event-stream") -> openai.AsyncOpenAI:
    async def handler(_: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)

    http_client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return openai.AsyncOpenAI(base_url="http://t/v1", api_key="k", http_client=http_client)
