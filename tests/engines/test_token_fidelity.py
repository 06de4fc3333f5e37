"""Token fidelity: what the embedded engine records is what a fresh forward pass computes.

For every generated sequence, the recorded logprob of each output token equals
log_softmax(logits / T) of a single full forward pass over prompt + output, gathered at that
token (fp32: max abs diff <= 1e-5), alone and with 8 concurrent requests of different prompt
lengths joining and leaving the batch at different steps, or arriving together (prefilled in one
left-padded forward); under a grammar's token mask too.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import llguidance
import pytest
import torch

from rltap.engines.transformers import TransformersEngine
from rltap.record.types import Constraint, ModelRequest, ModelResponse

TOLERANCE = 1e-5


def prompts(qwen_tokenizer: Any) -> list[list[int]]:
    """Eight chat prompts of different lengths (about 20 to 90 tokens)."""
    questions = [
        "Hi",
        "What is 2 + 2?",
        "Name three rivers in Europe.",
        "Write a haiku about the sea, then explain its imagery in one sentence.",
        "Summarise the plot of Hamlet in two sentences, without spoilers for the ending.",
        "List the planets of the solar system in order, with one fact about each of them.",
        "Translate 'good morning' to French, German, Spanish and Italian, one per line.",
        "Explain, step by step, how a hash map handles collisions with open addressing, and "
        "compare it with separate chaining in terms of memory use and cache behaviour.",
    ]
    return [
        qwen_tokenizer.apply_chat_template(
            [{"role": "user", "content": q}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for q in questions
    ]


def max_logprob_diff(model: Any, request: ModelRequest, response: ModelResponse) -> float:
    """Max |recorded - fresh| over the output, fresh = one full forward over prompt + output."""
    assert response.input_tokens == request.input_ids  # the prompt the engine consumed
    temperature = request.temperature if request.temperature > 0 else 1.0
    sequence = torch.tensor([response.input_tokens + response.output_tokens])
    with torch.no_grad():
        logits = model(input_ids=sequence).logits[0].float()
    prompt_len, output = response.input_len, torch.tensor(response.output_tokens)
    fresh = torch.log_softmax(logits[prompt_len - 1 : -1] / temperature, dim=-1)
    fresh = fresh.gather(1, output[:, None]).squeeze(1)
    recorded = torch.tensor(response.output_logprobs, dtype=torch.float32)
    return float((fresh - recorded).abs().max())


@pytest.mark.parametrize("temperature", [pytest.param(0.7, id="T0.7"), pytest.param(1.0, id="T1")])
@pytest.mark.parametrize(
    ("concurrency", "together"),
    [
        pytest.param(1, False, id="batch1"),
        pytest.param(8, False, id="conc8-staggered"),
        pytest.param(8, True, id="conc8-together"),
    ],
)
async def test_recorded_logprobs_match_a_fresh_forward_pass(
    tiny_model: Any, qwen_tokenizer: Any, temperature: float, concurrency: int, together: bool
) -> None:
    engine = TransformersEngine(tiny_model, tokenizer=qwen_tokenizer, eos_token_ids=[])
    requests = [
        ModelRequest(
            input_ids=ids,
            temperature=temperature,
            seed=i,
            # Different lengths: rows leave the batch at different steps.
            max_new_tokens=16 + 2 * i,
            top_p=0.95 if i % 2 else 1.0,
            top_k=40 if i % 3 == 0 else 0,
        )
        for i, ids in enumerate(prompts(qwen_tokenizer)[:concurrency])
    ]

    # Staggered, request i arrives once request i-1 has its first token: each joins a batch
    # mid-decode. Together, all arrive before the first step: one batched prefill.
    arrived = [asyncio.Event() for _ in range(len(requests) + 1)]
    for event in arrived[: len(arrived) if together else 1]:
        event.set()
    await engine.start()

    async def staggered(i: int, request: ModelRequest) -> ModelResponse:
        await arrived[i].wait()
        response = ModelResponse(input_tokens=list(request.input_ids))
        async for chunk in engine.stream(request):
            response.extend(chunk)
            arrived[i + 1].set()
        return response

    try:
        responses = await asyncio.gather(*(staggered(i, r) for i, r in enumerate(requests)))
    finally:
        await engine.close()
    diffs = [max_logprob_diff(tiny_model, q, r) for q, r in zip(requests, responses, strict=True)]
    print(f"\nT={temperature} concurrency={concurrency}: max |logprob diff| = {max(diffs):.3g}")
    assert all(r.output_len == q.max_new_tokens for q, r in zip(requests, responses, strict=True))
    assert max(diffs) <= TOLERANCE


async def test_greedy_logprobs_are_taken_at_temperature_1(
    tiny_model: Any, qwen_tokenizer: Any
) -> None:
    engine = TransformersEngine(tiny_model, tokenizer=qwen_tokenizer, eos_token_ids=[])
    request = ModelRequest(input_ids=prompts(qwen_tokenizer)[3], temperature=0, max_new_tokens=24)
    try:
        response = await engine.generate(request)
    finally:
        await engine.close()
    diff = max_logprob_diff(tiny_model, request, response)
    print(f"\ngreedy: max |logprob diff| = {diff:.3g}")
    assert diff <= TOLERANCE


async def test_constrained_logprobs_are_the_unmasked_distribution(
    tiny_model: Any, qwen_tokenizer: Any
) -> None:
    # The grammar's mask filters what is sampled, like top-k: the recorded logprob stays the
    # model's own log_softmax(logits / T), which a fresh forward reproduces.
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string", "maxLength": 16}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        schema, defaults={"whitespace_flexible": False}
    )
    constraint = Constraint(grammar=grammar, reason="response_format 'Answer'", json_schema=schema)
    engine = TransformersEngine(tiny_model, tokenizer=qwen_tokenizer, eos_token_ids=[151645])
    requests = [
        ModelRequest(
            input_ids=ids,
            temperature=temperature,
            seed=i,
            max_new_tokens=64,
            constraint=constraint if i % 2 == 0 else None,
        )
        for i, (ids, temperature) in enumerate(
            zip(prompts(qwen_tokenizer)[:4], [0.0, 0.7, 1.0, 0.7], strict=True)
        )
    ]
    try:
        responses = await asyncio.gather(*(engine.generate(r) for r in requests))
    finally:
        await engine.close()
    for request, response in zip(requests, responses, strict=True):
        assert response.constrained == (request.constraint is not None)
        assert max_logprob_diff(tiny_model, request, response) <= TOLERANCE
    # The greedy constrained reply is valid JSON, and the mask was real: some of its tokens
    # are not the unmasked argmax (so a masked, renormalised logprob would have differed).
    greedy = responses[0]
    assert set(json.loads(qwen_tokenizer.decode(greedy.output_tokens[:-1]))) == {"answer", "sure"}
    sequence = torch.tensor([greedy.input_tokens + greedy.output_tokens])
    with torch.no_grad():
        logits = tiny_model(input_ids=sequence).logits[0, greedy.input_len - 1 : -1]
    assert logits.argmax(dim=-1).tolist() != greedy.output_tokens
