"""The scripted engine: scripted text as real tokens, real teacher-forced logprobs, failures."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rltap.engines.base import InferenceEngine
from rltap.engines.scripted import ScriptedEngine, load_script
from rltap.record.errors import EngineError, EngineTimeout
from rltap.record.types import LogprobConvention, ModelRequest, StopReason

IM_END = 151645
MESSAGES = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]


def echo_turn(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, turn: int) -> str:
    return f"Reply number {turn} to: {messages[-1]['content'] if messages else ''}"


async def async_script(messages: list[dict[str, Any]], tools: Any, turn: int) -> str:
    await asyncio.sleep(0)
    return f"{len(tools or [])} tools"


@pytest.fixture
async def make_engine(
    tiny_model: Any, qwen_tokenizer: Any
) -> AsyncIterator[Callable[..., ScriptedEngine]]:
    """ScriptedEngine(script, tiny_model, tokenizer=qwen, **kwargs), closed after the test."""
    engines: list[ScriptedEngine] = []

    def make(script: Any = echo_turn, **kwargs: Any) -> ScriptedEngine:
        engines.append(ScriptedEngine(script, tiny_model, tokenizer=qwen_tokenizer, **kwargs))
        return engines[-1]

    yield make
    for eng in engines:
        await eng.close()


@pytest.fixture
def engine(make_engine: Callable[..., ScriptedEngine]) -> ScriptedEngine:
    return make_engine()


def request(qwen_tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> ModelRequest:
    ids = qwen_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return ModelRequest(input_ids=ids, messages=messages, **kwargs)


async def test_reply_is_real_tokens_with_teacher_forced_logprobs(
    engine: ScriptedEngine, tiny_model: Any, qwen_tokenizer: Any
) -> None:
    assert isinstance(engine, InferenceEngine)
    req = request(qwen_tokenizer, MESSAGES)
    response = await engine.generate(req)
    expected = qwen_tokenizer.encode("Reply number 1 to: And of Italy?", add_special_tokens=False)
    assert response.output_tokens == [*expected, IM_END]
    assert response.stop_reason is StopReason.STOP
    assert response.logprob_convention is LogprobConvention.RAW
    assert response.output_versions == [0] * response.output_len
    sequence = torch.tensor([req.input_ids + response.output_tokens])
    with torch.no_grad():
        logits = tiny_model(input_ids=sequence).logits[0]
    fresh = torch.log_softmax(logits[len(req.input_ids) - 1 : -1], dim=-1)
    fresh = fresh.gather(1, torch.tensor(response.output_tokens)[:, None]).squeeze(1)
    assert (fresh - torch.tensor(response.output_logprobs)).abs().max() <= 1e-5


async def test_turn_counts_assistant_messages(engine: ScriptedEngine, qwen_tokenizer: Any) -> None:
    first = await engine.generate(request(qwen_tokenizer, MESSAGES[:1]))
    text = qwen_tokenizer.decode(first.output_tokens, skip_special_tokens=True)
    assert text.startswith("Reply number 0")
    no_messages = await engine.generate(ModelRequest(input_ids=[9707]))
    assert qwen_tokenizer.decode(no_messages.output_tokens).startswith("Reply number 0 to: ")


async def test_async_script_sees_the_tools(
    make_engine: Callable[..., ScriptedEngine], qwen_tokenizer: Any
) -> None:
    eng = make_engine(async_script)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    response = await eng.generate(request(qwen_tokenizer, MESSAGES, tools=tools))
    assert qwen_tokenizer.decode(response.output_tokens) == "1 tools<|im_end|>"


@pytest.mark.parametrize(
    ("kwargs", "n_tokens", "reason"),
    [
        pytest.param({"max_new_tokens": 3}, 3, StopReason.LENGTH, id="max-new-tokens"),
        pytest.param({"stop": [" to"]}, 5, StopReason.STOP, id="stop-string"),
        pytest.param({"stop_token_ids": [1372]}, 2, StopReason.STOP, id="stop-token-id"),
    ],
)
async def test_stop_criteria_cut_the_reply(
    engine: ScriptedEngine,
    qwen_tokenizer: Any,
    kwargs: dict[str, Any],
    n_tokens: int,
    reason: StopReason,
) -> None:
    whole = await engine.generate(request(qwen_tokenizer, MESSAGES))
    assert whole.output_tokens[1] == 1372  # " number"
    cut = await engine.generate(request(qwen_tokenizer, MESSAGES, **kwargs))
    assert cut.output_tokens == whole.output_tokens[:n_tokens]
    assert cut.output_logprobs == pytest.approx(whole.output_logprobs[:n_tokens], abs=1e-5)
    assert cut.stop_reason is reason


async def test_the_reply_streams_one_token_a_chunk(
    engine: ScriptedEngine, qwen_tokenizer: Any
) -> None:
    req = request(qwen_tokenizer, MESSAGES)
    chunks = [chunk async for chunk in engine.stream(req)]
    whole = await engine.generate(req)
    assert [len(c.token_ids) for c in chunks] == [1] * whole.output_len
    assert [t for c in chunks for t in c.token_ids] == whole.output_tokens
    assert [lp for c in chunks for lp in c.logprobs] == whole.output_logprobs
    assert [v for c in chunks for v in c.versions] == whole.output_versions
    assert [c.stop_reason for c in chunks] == [None] * (len(chunks) - 1) + [StopReason.STOP]


async def test_token_delay_streams_one_token_at_a_time(
    make_engine: Callable[..., ScriptedEngine], qwen_tokenizer: Any
) -> None:
    eng = make_engine(token_delay=0.02)
    arrivals: list[float] = []
    chunks = []
    async for chunk in eng.stream(request(qwen_tokenizer, MESSAGES)):
        arrivals.append(time.perf_counter())
        chunks.append(chunk)
    assert [len(c.token_ids) for c in chunks] == [1] * len(chunks)
    assert len(chunks) > 5
    assert arrivals[-1] - arrivals[0] >= 0.02 * (len(chunks) - 1) * 0.9
    assert [c.stop_reason for c in chunks][-2:] == [None, StopReason.STOP]


async def test_abort_ends_the_stream_with_abort(
    make_engine: Callable[..., ScriptedEngine], qwen_tokenizer: Any
) -> None:
    eng = make_engine(token_delay=0.01)
    req = request(qwen_tokenizer, MESSAGES, request_id="r1")
    chunks = []
    async for chunk in eng.stream(req):
        chunks.append(chunk)
        if len(chunks) == 2:
            await eng.abort("r1")
    assert len(chunks) == 3
    assert chunks[-1].stop_reason is StopReason.ABORT


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(EngineTimeout, id="class"),
        pytest.param(EngineError("boom", is_retryable=False), id="instance"),
    ],
)
async def test_failure_injection_on_chosen_turns(
    make_engine: Callable[..., ScriptedEngine], qwen_tokenizer: Any, failure: Any
) -> None:
    eng = make_engine(failures={1: failure}, fail_after_tokens=2)
    ok = await eng.generate(request(qwen_tokenizer, MESSAGES[:1]))
    assert ok.stop_reason is StopReason.STOP
    streamed: list[int] = []

    async def consume() -> None:
        async for chunk in eng.stream(request(qwen_tokenizer, MESSAGES)):
            streamed.extend(chunk.token_ids)

    expected = failure if isinstance(failure, type) else type(failure)
    with pytest.raises(expected):
        await consume()
    assert len(streamed) == 2


async def test_a_failing_script_raises_engine_error(
    make_engine: Callable[..., ScriptedEngine], qwen_tokenizer: Any
) -> None:
    def broken(messages: Any, tools: Any, turn: int) -> str:
        raise KeyError("oops")

    eng = make_engine(broken)
    with pytest.raises(EngineError, match="KeyError"):
        await eng.generate(request(qwen_tokenizer, MESSAGES))


def test_load_script_from_module_or_file(tmp_path: Path) -> None:
    assert load_script("os.path:join") is __import__("os").path.join
    script_file = tmp_path / "user_sim.py"
    script_file.write_text("def reply(messages, tools, turn):\n    return 'hi'\n")
    loaded = load_script(f"{script_file}:reply")
    assert loaded([], None, 0) == "hi"
    with pytest.raises(ValueError, match="module:function"):
        load_script("no_colon")
    with pytest.raises(ValueError, match="not a callable"):
        load_script("os.path:sep")


async def test_script_given_as_a_string(
    make_engine: Callable[..., ScriptedEngine], qwen_tokenizer: Any
) -> None:
    eng = make_engine(f"{__name__}:async_script")
    response = await eng.generate(request(qwen_tokenizer, MESSAGES))
    assert qwen_tokenizer.decode(response.output_tokens) == "0 tools<|im_end|>"
    eng.set_version(3)
    assert eng.version == 3
    again = await eng.generate(request(qwen_tokenizer, MESSAGES))
    assert set(again.output_versions) == {3}
