"""SGLangEngine against a fake SGLang server (SGLang cannot run on these CPU-only machines).

The fake (`rltap.testing.fakes.FakeSGLang`) is a real HTTP server on 127.0.0.1 that follows
SGLang's documented `/generate` request and response fields; see its docstring for what it covers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from rltap.engines.base import InferenceEngine
from rltap.engines.sglang import SGLangEngine
from rltap.record.errors import EngineError, EngineUnavailable
from rltap.record.types import (
    Constraint,
    LogprobConvention,
    ModelRequest,
    ModelResponse,
    StopReason,
    TokenChunk,
)
from rltap.testing.fakes import FakeSGLang, expected_output

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


@pytest.fixture
async def fake() -> AsyncIterator[FakeSGLang]:
    async with FakeSGLang() as server:
        yield server


@pytest.fixture
async def engine(fake: FakeSGLang) -> AsyncIterator[SGLangEngine]:
    engine = SGLangEngine(fake.url, version=3)
    await engine.start()
    yield engine
    await engine.close()


async def _collect(engine: SGLangEngine, request: ModelRequest) -> tuple[ModelResponse, int]:
    response = ModelResponse(input_tokens=list(request.input_ids))
    chunks: list[TokenChunk] = []
    async for chunk in engine.stream(request):
        chunks.append(chunk)
        response.extend(chunk)
    assert chunks[-1].stop_reason is not None
    assert all(chunk.stop_reason is None for chunk in chunks[:-1])
    return response, len(chunks)


def test_is_an_inference_engine() -> None:
    assert isinstance(SGLangEngine("http://127.0.0.1:1"), InferenceEngine)


async def test_generate_sends_sglang_fields_and_reads_logprob_triples(
    fake: FakeSGLang, engine: SGLangEngine
) -> None:
    request = ModelRequest(
        input_ids=PROMPT, max_new_tokens=5, temperature=0.7, top_p=0.9, top_k=20, seed=11
    )
    response = await engine.generate(request)

    tokens, logprobs = expected_output(PROMPT, 5)
    assert response.input_tokens == PROMPT
    assert response.output_tokens == tokens
    assert response.output_logprobs == pytest.approx(logprobs)
    assert response.output_versions == [3] * 5
    assert response.stop_reason is StopReason.LENGTH
    assert response.logprob_convention is LogprobConvention.TEMPERATURE_SCALED
    assert fake.requests == [
        {
            "input_ids": PROMPT,
            "sampling_params": {
                "max_new_tokens": 5,
                "temperature": 0.7,
                "top_p": 0.9,
                "top_k": 20,
                "skip_special_tokens": False,
                "no_stop_trim": True,
                "sampling_seed": 11,
            },
            "return_logprob": True,
            "stream": False,
            "rid": request.request_id,
        }
    ]


async def test_top_k_zero_is_left_to_sglang_default(fake: FakeSGLang, engine: SGLangEngine) -> None:
    await engine.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=2, top_k=0))
    assert "top_k" not in fake.requests[0]["sampling_params"]
    assert "sampling_seed" not in fake.requests[0]["sampling_params"]


async def test_stop_token_ends_generation_and_is_kept(engine: SGLangEngine) -> None:
    tokens, _ = expected_output(PROMPT, 8)
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=8, stop_token_ids=[tokens[3]])
    response = await engine.generate(request)
    assert response.output_tokens == tokens[:4]
    assert response.stop_reason is StopReason.STOP


@pytest.mark.parametrize(
    "incremental",
    [pytest.param(False, id="cumulative"), pytest.param(True, id="incremental")],
)
async def test_stream_matches_generate(
    fake: FakeSGLang, engine: SGLangEngine, incremental: bool
) -> None:
    fake.incremental = incremental
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=6, temperature=0.0)
    streamed, n_chunks = await _collect(engine, request)
    generated = await engine.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=6))

    assert n_chunks == 7  # one event per token, then the finish event
    assert streamed.output_tokens == generated.output_tokens
    assert streamed.output_logprobs == generated.output_logprobs
    assert streamed.stop_reason is StopReason.LENGTH
    assert fake.requests[0]["stream"] is True


async def test_stream_stamps_the_version_current_at_each_token(
    fake: FakeSGLang, engine: SGLangEngine
) -> None:
    fake.token_delay = 0.01
    versions: list[int] = []
    async for chunk in engine.stream(ModelRequest(input_ids=PROMPT, max_new_tokens=4)):
        versions.extend(chunk.versions)
        engine.set_version(engine.version + 1)
    assert versions == [3, 4, 5, 6]


async def test_prompt_too_long_is_a_non_retryable_engine_error(engine: SGLangEngine) -> None:
    request = ModelRequest(input_ids=[1] * 1020, max_new_tokens=16)
    with pytest.raises(EngineError, match="maximum context length") as info:
        await engine.generate(request)
    assert info.value.is_retryable is False
    assert "HTTP 400" in info.value.message


async def test_unreachable_server_is_retryable_unavailable() -> None:
    engine = SGLangEngine("http://127.0.0.1:9", connect_timeout=2.0)
    with pytest.raises(EngineUnavailable) as info:
        await engine.generate(ModelRequest(input_ids=PROMPT, max_new_tokens=2))
    assert info.value.is_retryable is True
    await engine.close()


@pytest.mark.parametrize(
    "incremental",
    [pytest.param(False, id="cumulative"), pytest.param(True, id="incremental")],
)
async def test_abort_stops_a_stream_through_abort_request(
    fake: FakeSGLang, engine: SGLangEngine, incremental: bool
) -> None:
    fake.incremental = incremental
    fake.token_delay = 0.02
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=500)
    chunks: list[TokenChunk] = []
    async for chunk in engine.stream(request):
        chunks.append(chunk)
        if len(chunks) == 2:
            await engine.abort(request.request_id)
    assert chunks[-1].stop_reason is StopReason.ABORT
    produced = [token for chunk in chunks for token in chunk.token_ids]
    assert 2 <= len(produced) < 500
    assert produced == expected_output(PROMPT, len(produced))[0]
    assert fake.aborted == [request.request_id]


async def test_abort_returns_the_partial_output_of_generate(
    fake: FakeSGLang, engine: SGLangEngine
) -> None:
    fake.token_delay = 0.01
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=500)
    task = asyncio.create_task(engine.generate(request))
    await asyncio.sleep(0.1)
    await engine.abort(request.request_id)
    response = await asyncio.wait_for(task, timeout=10)
    assert response.stop_reason is StopReason.ABORT
    assert 0 < response.output_len < 500
    assert response.output_tokens == expected_output(PROMPT, response.output_len)[0]


async def test_abort_of_an_unknown_request_is_a_no_op(
    fake: FakeSGLang, engine: SGLangEngine
) -> None:
    await engine.abort("not-in-flight")
    assert fake.aborted == []


async def test_closing_a_stream_early_disconnects_and_sglang_aborts(
    fake: FakeSGLang, engine: SGLangEngine
) -> None:
    fake.token_delay = 0.02
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=500)
    stream = engine.stream(request)
    async for _chunk in stream:
        break
    await stream.aclose()  # type: ignore[attr-defined]
    for _ in range(100):
        if fake.aborted:
            break
        await asyncio.sleep(0.02)
    assert fake.aborted == [request.request_id]


async def test_a_mid_stream_error_event_is_a_non_retryable_engine_error() -> None:
    from aiohttp import web

    async def generate(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"error": {"message": "bad stop string"}}\n\n')
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/generate", generate)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    engine = SGLangEngine(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(EngineError, match="bad stop string") as info:
            async for _chunk in engine.stream(ModelRequest(input_ids=PROMPT)):
                pass
        assert info.value.is_retryable is False
    finally:
        await engine.close()
        await runner.cleanup()


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        pytest.param(
            Constraint(grammar="start: %json{}", reason="response_format", json_schema=SCHEMA),
            {
                "json_schema": '{"type":"object","properties":{"a":{"type":"integer"}},'
                '"required":["a"]}'
            },
            id="json-schema",
        ),
        pytest.param(
            Constraint(grammar='start: "yes" | "no"', reason="tool_choice"),
            {"ebnf": 'start: "yes" | "no"'},
            id="grammar",
        ),
    ],
)
async def test_a_constraint_is_sent_as_sglangs_sampling_parameter(
    fake: FakeSGLang, engine: SGLangEngine, constraint: Constraint, expected: dict[str, str]
) -> None:
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=3, constraint=constraint)
    generated = await engine.generate(request)
    streamed, _ = await _collect(engine, request)
    assert generated.constrained
    assert streamed.output_tokens == generated.output_tokens
    for body in fake.requests:
        sent = {k: v for k, v in body["sampling_params"].items() if k in ("json_schema", "ebnf")}
        assert sent == expected
