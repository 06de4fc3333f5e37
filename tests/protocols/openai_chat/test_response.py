"""Chat Completions bodies: `chat.completion` objects and error envelopes, read by the SDK."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai.types.chat import ChatCompletion

from rltap.protocols import openai_chat as proto
from rltap.record.errors import EngineError, InvalidRequest, RltapError
from rltap.record.parsed import ContentDelta

from .support import CREATED, PROMPT_LEN, SCENARIOS, Scenario, generation_of, request, sdk_client


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_build_response_validates(scenario: Scenario) -> None:
    generation = generation_of(scenario)
    body = proto.build_response(request(), [generation])
    completion = ChatCompletion.model_validate(body)
    message = completion.choices[0].message
    expected = generation.output_message
    assert completion.id == generation.interaction_id
    assert completion.created == int(CREATED)
    assert completion.model == "m"
    assert message.content == expected["content"]
    assert [c.model_dump() for c in message.tool_calls or []] == expected.get("tool_calls", [])
    assert body["choices"][0]["message"].get("reasoning_content") == expected.get(
        "reasoning_content"
    )
    assert completion.choices[0].finish_reason == scenario.finish
    assert completion.choices[0].logprobs is None
    assert completion.usage is not None
    assert completion.usage.model_dump(exclude_none=True) == {
        "prompt_tokens": PROMPT_LEN,
        "completion_tokens": 2 * len(scenario.steps),
        "total_tokens": PROMPT_LEN + 2 * len(scenario.steps),
    }


def test_abort_is_length() -> None:
    generation = generation_of(Scenario([[ContentDelta("par")]], "abort"))
    body = proto.build_response(request(), [generation])
    assert ChatCompletion.model_validate(body).choices[0].finish_reason == "length"


@pytest.mark.parametrize("top", [pytest.param(None, id="no-top"), pytest.param(3, id="top-3")])
def test_response_logprobs(top: int | None) -> None:
    generation = generation_of(Scenario([[ContentDelta("a")], [ContentDelta("é")]], "stop"))
    overrides: dict[str, Any] = {"logprobs": True} | ({"top_logprobs": top} if top else {})
    body = proto.build_response(request(**overrides), [generation])
    logprobs = ChatCompletion.model_validate(body).choices[0].logprobs
    assert logprobs is not None
    content = logprobs.content or []
    assert [e.token for e in content] == ["t0", "t1", "t2", "t3"]
    assert [e.logprob for e in content] == [0.0, -0.5, -1.0, -1.5]
    assert content[0].bytes == list(b"t0")
    sampled_only = [[(t.token, t.logprob) for t in e.top_logprobs] for e in content]
    assert sampled_only == ([[(e.token, e.logprob)] for e in content] if top else [[]] * 4)


def test_response_logprob_fallbacks() -> None:
    generation = generation_of(Scenario([[ContentDelta("a")]], "stop"))
    generation.token_texts = []
    generation.response.output_logprobs[1] = float("-inf")
    body = proto.build_response(request(logprobs=True), [generation])
    content = body["choices"][0]["logprobs"]["content"]
    assert [(e["token"], e["logprob"]) for e in content] == [
        ("token_id:0", 0.0),
        ("token_id:1", -9999.0),
    ]


def test_response_n_choices() -> None:
    scenarios = [
        Scenario([[ContentDelta("a")]], "stop"),
        Scenario([[ContentDelta("b")]] * 2, "length"),
    ]
    generations = [generation_of(s, i) for i, s in enumerate(scenarios)]
    body = proto.build_response(request(n=2), generations[::-1])
    completion = ChatCompletion.model_validate(body)
    assert completion.id == generations[0].interaction_id
    assert [c.message.content for c in completion.choices] == ["a", "bb"]
    assert [c.finish_reason for c in completion.choices] == ["stop", "length"]
    assert [c["interaction_id"] for c in body["choices"]] == [g.interaction_id for g in generations]
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (PROMPT_LEN, 6)


def test_single_choice_has_no_interaction_id_extension() -> None:
    body = proto.build_response(request(), [generation_of(Scenario([[ContentDelta("a")]], "stop"))])
    assert "interaction_id" not in body["choices"][0]


async def test_sdk_create_reads_body() -> None:
    generation = generation_of(Scenario([[ContentDelta("hello")]], "stop"))
    body = orjson.dumps(proto.build_response(request(), [generation]))
    client = sdk_client(body, "application/json")
    completion = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "hello"


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(InvalidRequest("bad temperature", param="temperature"), id="invalid"),
        pytest.param(EngineError("engine down"), id="engine"),
    ],
)
def test_error_body(exc: RltapError) -> None:
    body = proto.error_body(exc)
    assert body == {
        "error": {
            "message": exc.message,
            "type": exc.error_type,
            "param": exc.param,
            "code": exc.code,
        }
    }
