"""Constrained decoding on the in-process engines: the embedded engine samples under a grammar's
token mask (one llguidance matcher per request in a batch); the scripted engine checks its
script's reply against the grammar.

The grammars are written by hand here; building them from a request's response_format or
tool_choice is the protocols' job (tested there).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import llguidance
import pytest
import torch

from rltap.engines._sampling import RowSampler, sample_rows
from rltap.engines.scripted import ScriptedEngine
from rltap.engines.transformers import TransformersEngine
from rltap.record.errors import EngineError, InvalidRequest
from rltap.record.types import Constraint, ModelRequest, ModelResponse, StopReason

PROMPT = [151644, 872, 198, 9707, 11, 1879, 0, 151645, 198, 151644, 77091, 198]
IM_END = 151645
# Bounded fields: the random model would otherwise write digits until max_new_tokens.
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "population": {"type": "integer", "minimum": 0, "maximum": 999},
        "capital": {"type": "boolean"},
    },
    "required": ["city", "population", "capital"],
    "additionalProperties": False,
}


def json_constraint(schema: dict[str, Any] = SCHEMA) -> Constraint:
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        schema, defaults={"whitespace_flexible": False}
    )
    return Constraint(grammar=grammar, reason="response_format 'City'", json_schema=schema)


def lark_constraint(grammar: str) -> Constraint:
    return Constraint(grammar=grammar, reason="tool_choice 'required'")


@pytest.fixture
async def make_engine(
    tiny_model: Any, qwen_tokenizer: Any
) -> AsyncIterator[Callable[..., TransformersEngine]]:
    engines: list[TransformersEngine] = []

    def make(**kwargs: Any) -> TransformersEngine:
        kwargs.setdefault("eos_token_ids", [IM_END])
        engines.append(TransformersEngine(tiny_model, tokenizer=qwen_tokenizer, **kwargs))
        return engines[-1]

    yield make
    for engine in engines:
        await engine.close()


def reply_text(tokenizer: Any, response: ModelResponse) -> str:
    tokens = response.output_tokens
    if response.stop_reason is StopReason.STOP and tokens and tokens[-1] == IM_END:
        tokens = tokens[:-1]
    return str(tokenizer.decode(tokens))


def assert_city(text: str) -> None:
    value = json.loads(text)
    assert set(value) == {"city", "population", "capital"}
    assert isinstance(value["city"], str)
    assert len(value["city"]) <= 12
    assert 0 <= value["population"] <= 999
    assert isinstance(value["capital"], bool)


@pytest.mark.parametrize(
    "sampling",
    [
        pytest.param({"temperature": 0.0}, id="greedy"),
        pytest.param({"temperature": 1.0, "seed": 3}, id="T1"),
        pytest.param({"temperature": 0.8, "seed": 5, "top_k": 50, "top_p": 0.9}, id="top-k-p"),
    ],
)
async def test_json_schema_reply_parses_and_ends_with_the_end_token(
    make_engine: Callable[..., TransformersEngine], qwen_tokenizer: Any, sampling: dict[str, Any]
) -> None:
    engine = make_engine()
    request = ModelRequest(
        input_ids=PROMPT, max_new_tokens=120, constraint=json_constraint(), **sampling
    )
    response = await engine.generate(request)
    assert response.constrained
    assert response.stop_reason is StopReason.STOP
    assert response.output_tokens[-1] == IM_END
    assert_city(reply_text(qwen_tokenizer, response))


async def test_lark_grammar_with_a_special_token_and_embedded_json(
    make_engine: Callable[..., TransformersEngine], qwen_tokenizer: Any
) -> None:
    # Compact JSON (`x-guidance`): with free whitespace the random model pads forever.
    grammar = (
        'start: <tool_call> "\\n" %json{"x-guidance": {"whitespace_flexible": false}, '
        '"type": "object", "properties": {"name": {"const": '
        '"get_weather"}, "arguments": {"type": "object", "properties": {"unit": {"enum": '
        '["C", "F"]}}, "required": ["unit"], "additionalProperties": false}}, "required": '
        '["name", "arguments"], "additionalProperties": false} "\\n" </tool_call>'
    )
    engine = make_engine()
    response = await engine.generate(
        ModelRequest(
            input_ids=PROMPT,
            max_new_tokens=60,
            temperature=1.0,
            seed=0,
            constraint=lark_constraint(grammar),
        )
    )
    assert response.stop_reason is StopReason.STOP
    tool_call, end_call = (
        qwen_tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>")
    )
    assert response.output_tokens[0] == tool_call
    assert response.output_tokens[-2:] == [end_call, IM_END]
    call = json.loads(qwen_tokenizer.decode(response.output_tokens[1:-2]))
    assert call["name"] == "get_weather"
    assert call["arguments"]["unit"] in {"C", "F"}


async def test_a_complete_grammar_without_end_ids_ends_on_its_last_token(
    make_engine: Callable[..., TransformersEngine], qwen_tokenizer: Any
) -> None:
    engine = make_engine(eos_token_ids=[])
    response = await engine.generate(
        ModelRequest(
            input_ids=PROMPT,
            max_new_tokens=20,
            temperature=0,
            constraint=lark_constraint('start: "yes" | "no"'),
        )
    )
    assert response.stop_reason is StopReason.STOP
    assert qwen_tokenizer.decode(response.output_tokens) in {"yes", "no"}


async def test_max_new_tokens_cuts_a_constrained_reply_with_length(
    make_engine: Callable[..., TransformersEngine], qwen_tokenizer: Any
) -> None:
    engine = make_engine()
    response = await engine.generate(
        ModelRequest(
            input_ids=PROMPT, max_new_tokens=3, temperature=0, constraint=json_constraint()
        )
    )
    assert response.stop_reason is StopReason.LENGTH
    assert response.output_len == 3
    assert qwen_tokenizer.decode(response.output_tokens).startswith('{"')


async def test_an_uncompilable_grammar_is_an_invalid_request(
    make_engine: Callable[..., TransformersEngine],
) -> None:
    engine = make_engine()
    bad = lark_constraint("start: undefined_rule")
    with pytest.raises(InvalidRequest, match=r"tool_choice 'required'.*does not compile"):
        await engine.generate(ModelRequest(input_ids=PROMPT, constraint=bad))
    # The engine still serves the next request.
    response = await engine.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=2))
    assert response.output_len == 2
    assert not response.constrained


async def test_unconstrained_rows_get_the_tokens_they_get_alone(
    make_engine: Callable[..., TransformersEngine], qwen_tokenizer: Any
) -> None:
    engine = make_engine(eos_token_ids=[])
    plain = [
        ModelRequest(input_ids=PROMPT, max_new_tokens=24, temperature=0),
        ModelRequest(input_ids=PROMPT[:5], max_new_tokens=24, temperature=1.0, seed=11),
    ]
    alone = [await engine.generate(request) for request in plain]
    constrained = [
        ModelRequest(
            input_ids=PROMPT[: 4 + i],
            max_new_tokens=24,
            temperature=0.0 if i % 2 else 1.0,
            seed=i,
            constraint=json_constraint(),
        )
        for i in range(6)
    ]
    again = [
        ModelRequest(
            input_ids=r.input_ids, max_new_tokens=24, temperature=r.temperature, seed=r.seed
        )
        for r in plain
    ]
    responses = await asyncio.gather(*(engine.generate(r) for r in [*constrained, *again]))
    together = responses[len(constrained) :]
    for before, after in zip(alone, together, strict=True):
        assert after.output_tokens == before.output_tokens
        # Same tokens; the logprobs up to float summation order in a bigger batch.
        assert after.output_logprobs == pytest.approx(before.output_logprobs, abs=1e-5)
        assert not after.constrained
    for response in responses[: len(constrained)]:
        assert response.constrained
        assert response.stop_reason is StopReason.STOP
        assert_city(qwen_tokenizer.decode(response.output_tokens))


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 1.0, "seed": 1}])
def test_allowed_tokens_far_below_the_likeliest_are_still_sampled(sampling: dict[str, Any]) -> None:
    # exp(logp) of every allowed token underflows to 0 in float32 (logp ~ -1000): the
    # sampler must still pick an allowed token, not a blocked one or an index past the end.
    logits = torch.zeros(2, 1000)
    logits[:, 0] = 1000.0
    allowed = torch.zeros(1000, dtype=torch.uint8)
    allowed[[5, 7]] = 1
    request = ModelRequest(input_ids=[1], **sampling)
    samplers = [RowSampler.for_request(request, torch.device("cpu")) for _ in range(2)]
    tokens, logprobs = sample_rows(logits, samplers, {1: allowed})
    assert tokens[0] == 0  # the unconstrained row
    assert tokens[1] in (5, 7)
    assert logprobs[1] == pytest.approx(-1000.0)  # the unmasked distribution's logprob


# -- the scripted engine ----------------------------------------------------------------------


@pytest.fixture
async def scripted(tiny_model_dir: Any) -> AsyncIterator[Callable[[str], ScriptedEngine]]:
    engines: list[ScriptedEngine] = []

    def make(reply: str) -> ScriptedEngine:
        engines.append(ScriptedEngine(lambda messages, tools, turn: reply, model=tiny_model_dir))
        return engines[-1]

    yield make
    for engine in engines:
        await engine.close()


async def test_scripted_reply_that_matches_the_grammar_is_emitted(
    scripted: Callable[[str], ScriptedEngine], qwen_tokenizer: Any
) -> None:
    reply = '{"city":"Paris","population":2,"capital":true}'
    engine = scripted(reply)
    response = await engine.generate(ModelRequest(input_ids=PROMPT, constraint=json_constraint()))
    assert response.constrained
    assert response.output_tokens == [*qwen_tokenizer.encode(reply), IM_END]
    assert response.stop_reason is StopReason.STOP


@pytest.mark.parametrize(
    ("reply", "refused"),
    [
        pytest.param('{"city": "Paris"}', "' \"Paris", id="whitespace"),
        pytest.param('{"city":"Paris"}', "'\"}<|im_end|>'", id="required-key-missing"),
        pytest.param("Sure! Here it is.", "'Sure", id="prose"),
    ],
)
async def test_scripted_reply_the_grammar_refuses_fails_naming_the_constraint(
    scripted: Callable[[str], ScriptedEngine], reply: str, refused: str
) -> None:
    engine = scripted(reply)
    with pytest.raises(EngineError, match=r"response_format 'City'") as caught:
        await engine.generate(ModelRequest(input_ids=PROMPT, constraint=json_constraint()))
    assert f"refuses {refused}" in str(caught.value)
    assert not caught.value.is_retryable
