"""Responses bodies: `response` objects, their status and items, and the error envelope."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import pytest
from openai.types.responses import Response

from rltap.protocols import openai_responses as proto
from rltap.record.errors import CapacityExhausted, EngineError, InvalidRequest, RltapError
from rltap.record.generation import FinishReason

from .support import CASE_PARAMS, CASES, make_generation, request_for, sdk_client


@pytest.mark.parametrize("kwargs", CASE_PARAMS)
def test_build_response_is_a_valid_sdk_response(kwargs: dict[str, Any]) -> None:
    generation = make_generation(**kwargs)
    body = proto.build_response(request_for(), [generation])
    response = Response.model_validate(body)
    assert response.id == generation.interaction_id
    assert response.object == "response"
    assert response.output_text == kwargs.get("content", "")
    calls = [(i.call_id, i.name, i.arguments) for i in response.output if i.type == "function_call"]
    assert calls == list(kwargs.get("calls", []))
    reasoning = [i for i in response.output if i.type == "reasoning"]
    assert [r.content[0].text for r in reasoning if r.content] == (
        [kwargs["reasoning"]] if "reasoning" in kwargs else []
    )
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (5, 6)
    assert response.usage.total_tokens == 11
    assert response.tools[0].type == "function"


@pytest.mark.parametrize(
    ("finish", "status", "details"),
    [
        pytest.param("stop", "completed", None, id="stop"),
        pytest.param("tool_calls", "completed", None, id="tool-calls"),
        pytest.param("length", "incomplete", {"reason": "max_output_tokens"}, id="length"),
        pytest.param("abort", "cancelled", None, id="abort"),
    ],
)
def test_status(finish: FinishReason, status: str, details: Any) -> None:
    body = proto.build_response(request_for(), [make_generation(content="x", finish=finish)])
    assert (body["status"], body["incomplete_details"]) == (status, details)
    assert body["output"][0]["status"] == ("completed" if status == "completed" else "incomplete")


def test_output_items_order_and_ids() -> None:
    generation = make_generation(**CASES["text-reasoning-two-calls"])
    output = proto.build_response(request_for(), [generation])["output"]
    assert [(i["type"], i["id"]) for i in output] == [
        ("reasoning", "rs_0123abcd_0"),
        ("message", "msg_0123abcd_1"),
        ("function_call", "fc_0123abcd_2"),
        ("function_call", "fc_0123abcd_3"),
    ]
    assert output[1]["content"] == [
        {"type": "output_text", "text": "Let me check both.", "annotations": [], "logprobs": []}
    ]


def test_echoed_request_fields() -> None:
    request = request_for(
        tool_choice="required", temperature=0.3, max_output_tokens=9, metadata={"a": "b"}
    )
    response = Response.model_validate(proto.build_response(request, [make_generation()]))
    assert response.tool_choice == "required"
    assert (response.temperature, response.max_output_tokens) == (0.3, 9)
    assert response.metadata == {"a": "b"}
    assert response.tools[0].name == "get_weather"  # type: ignore[union-attr]


def test_instructions_reasoning_and_text_are_echoed_as_sent() -> None:
    request = request_for(
        instructions="Be brief.",
        reasoning={"effort": "low", "summary": "concise"},
        text={"format": {"type": "text"}, "verbosity": "low"},
        parallel_tool_calls=False,
        top_p=0.5,
    )
    response = Response.model_validate(proto.build_response(request, [make_generation()]))
    assert response.instructions == "Be brief."
    assert response.reasoning is not None
    assert (response.reasoning.effort, response.reasoning.summary) == ("low", "concise")
    assert response.text is not None
    assert response.text.model_dump(exclude_none=True) == {
        "format": {"type": "text"},
        "verbosity": "low",
    }
    assert (response.parallel_tool_calls, response.top_p) == (False, 0.5)


def test_unset_settings_echo_openais_defaults() -> None:
    body = proto.build_response(request_for(), [make_generation()])
    assert body["instructions"] is None
    assert body["reasoning"] == {"effort": None, "summary": None}
    assert body["text"] == {"format": {"type": "text"}}
    assert body["tool_choice"] == "auto"


@pytest.mark.parametrize(
    ("reasoning", "summary"),
    [
        pytest.param(None, [], id="not-asked"),
        pytest.param({"effort": "high"}, [], id="effort-only"),
        pytest.param(
            {"summary": "auto"}, [{"type": "summary_text", "text": "Two cities."}], id="auto"
        ),
        pytest.param(
            {"summary": "detailed"},
            [{"type": "summary_text", "text": "Two cities."}],
            id="detailed",
        ),
    ],
)
def test_reasoning_summary_is_the_reasoning_when_asked_for(
    reasoning: dict[str, Any] | None, summary: list[dict[str, Any]]
) -> None:
    request = request_for(**({"reasoning": reasoning} if reasoning else {}))
    generation = make_generation(**CASES["text-reasoning-two-calls"])
    body = proto.build_response(request, [generation])
    (item,) = [item for item in body["output"] if item["type"] == "reasoning"]
    assert item["summary"] == summary
    assert item["content"] == [{"type": "reasoning_text", "text": "Two cities."}]
    Response.model_validate(body)


def test_logprobs_on_request() -> None:
    request = request_for(include=["message.output_text.logprobs"])
    body = proto.build_response(request, [make_generation(content="Hi", n_out=2)])
    message = Response.model_validate(body).output[0]
    assert message.type == "message"
    part = message.content[0]
    assert part.type == "output_text"
    assert part.logprobs is not None
    assert [(lp.token, lp.logprob) for lp in part.logprobs] == [("t0", -0.25), ("t1", -0.25)]


@pytest.mark.parametrize(
    ("exc", "status", "type_", "code"),
    [
        pytest.param(
            InvalidRequest("bad", param="input"), 400, "invalid_request_error", None, id="invalid"
        ),
        pytest.param(CapacityExhausted("busy"), 429, "rate_limit_error", None, id="capacity"),
        pytest.param(EngineError("down"), 502, "api_error", "engine_error", id="engine"),
    ],
)
async def test_error_body_through_sdk(
    exc: RltapError, status: int, type_: str, code: str | None
) -> None:
    body = proto.error_body(exc)
    assert body == {
        "error": {"message": exc.message, "type": type_, "param": exc.param, "code": code}
    }
    client = sdk_client(lambda _: httpx2.Response(status, json=body), max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        await client.responses.create(model="m", input="hi")
    assert (info.value.status_code, info.value.param, info.value.code) == (status, exc.param, code)


async def test_sdk_non_stream_body() -> None:
    generation = make_generation(**CASES["text-reasoning-two-calls"])
    body = proto.build_response(request_for(), [generation])
    client = sdk_client(lambda _: httpx2.Response(200, json=body))
    response = await client.responses.create(model="qwen", input="hi")
    assert response.output_text == "Let me check both."
    assert [i.type for i in response.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
