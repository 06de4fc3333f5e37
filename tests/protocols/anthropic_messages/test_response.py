"""Messages bodies: `Message` objects, stop reasons, and the error envelope, read by the SDK."""

from __future__ import annotations

import httpx2
import orjson
import pytest
from anthropic.types import ErrorResponse, Message

from rltap.protocols.anthropic_messages import build_response, error_body, parse_request
from rltap.record.errors import (
    AuthenticationError,
    CapacityExhausted,
    Conflict,
    ContextLengthExceeded,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RltapError,
    SessionGone,
)
from rltap.record.generation import FinishReason, Generation

from .support import GENERATIONS, USER, body, make_generation, request_for, sdk_client


@pytest.mark.parametrize(("generation", "reason"), GENERATIONS)
def test_build_response_is_an_sdk_message(generation: Generation, reason: str) -> None:
    raw = build_response(request_for(), [generation])
    message = Message.model_validate(raw)
    assert (message.id, message.model, message.stop_reason) == (
        generation.interaction_id,
        "m",
        reason,
    )
    assert message.stop_sequence == ("STOP" if reason == "stop_sequence" else None)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (5, 7)
    parsed = generation.parsed
    expected_types = (["thinking"] if parsed.reasoning else []) + (
        ["text"] if parsed.content else []
    )
    assert [b.type for b in message.content] == [
        *expected_types,
        *["tool_use"] * len(parsed.tool_calls),
    ]
    for block in message.content:
        if block.type == "thinking":
            assert (block.thinking, block.signature) == (
                parsed.reasoning,
                generation.interaction_id,
            )
        elif block.type == "text":
            assert block.text == parsed.content
    uses = [b for b in message.content if b.type == "tool_use"]
    for use, call in zip(uses, parsed.tool_calls, strict=True):
        assert use.id == "toolu_" + call.id.removeprefix("call_")
        assert (use.name, use.input) == (call.name, orjson.loads(call.arguments))


async def test_sdk_create_reads_body() -> None:
    generation = make_generation(reasoning="r", content="Hi!")
    raw = build_response(request_for(), [generation])
    client = sdk_client(lambda request: httpx2.Response(200, json=raw))
    message = await client.messages.create(model="m", max_tokens=64, messages=[USER])
    assert message.model_dump(exclude_none=True) == Message.model_validate(raw).model_dump(
        exclude_none=True
    )


@pytest.mark.parametrize(
    ("finish", "stop_sequence", "expected"),
    [
        pytest.param("stop", "END", ("stop_sequence", "END"), id="stop-string"),
        pytest.param("stop", None, ("end_turn", None), id="stop-token"),
        pytest.param("length", None, ("max_tokens", None), id="length"),
    ],
)
def test_stop_reason_reports_the_matched_stop_string(
    finish: FinishReason, stop_sequence: str | None, expected: tuple[str, str | None]
) -> None:
    # The session finds the string and cuts the text before it (rltap.chat.stop_strings); the
    # body reports it as it is.
    generation = make_generation(content="Done", finish=finish, stop_sequence=stop_sequence)
    raw = build_response(parse_request(body(stop_sequences=["END", "DONE"])), [generation])
    assert (raw["stop_reason"], raw["stop_sequence"]) == expected
    Message.model_validate(raw)


def test_abort_has_no_stop_reason() -> None:
    raw = build_response(request_for(), [make_generation(content="Par", finish="abort")])
    assert raw["stop_reason"] is None
    Message.model_validate(raw)


@pytest.mark.parametrize(
    ("exc", "error_type"),
    [
        pytest.param(InvalidRequest("bad", param="x"), "invalid_request_error", id="400"),
        pytest.param(ContextLengthExceeded("too long"), "invalid_request_error", id="400-context"),
        pytest.param(AuthenticationError("key"), "authentication_error", id="401"),
        pytest.param(PermissionDenied("no"), "permission_error", id="403"),
        pytest.param(NotFound("none"), "not_found_error", id="404"),
        pytest.param(Conflict("clash"), "conflict_error", id="409"),
        pytest.param(SessionGone("ended"), "invalid_request_error", id="410"),
        pytest.param(PayloadTooLarge("big"), "request_too_large", id="413"),
        pytest.param(CapacityExhausted("busy"), "rate_limit_error", id="429"),
        pytest.param(RltapError("oops"), "api_error", id="500"),
        pytest.param(EngineError("down"), "api_error", id="502"),
        pytest.param(EngineUnavailable("restarting"), "overloaded_error", id="503"),
        pytest.param(EngineTimeout("slow"), "timeout_error", id="504"),
    ],
)
def test_error_body(exc: RltapError, error_type: str) -> None:
    raw = error_body(exc)
    assert raw == {"type": "error", "error": {"type": error_type, "message": exc.message}}
    if error_type not in {"conflict_error", "request_too_large"}:  # not in the SDK's union
        assert ErrorResponse.model_validate(raw).error.type == error_type
