"""`VerlServerEngine`: rltap's requests as verl's `generate` calls, verl's replies as tokens."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from verl.workers.rollout.replica import TokenOutput

from rltap.record.errors import EngineError, InvalidRequest
from rltap.record.types import Constraint, LogprobConvention, ModelRequest, StopReason
from rltap_verl import VerlServerEngine, logprob_convention_of


class ScriptedServerManager:
    """verl's `generate` signature answering `reply` (or raising `error`); records each call."""

    def __init__(self, reply: TokenOutput | None = None, error: Exception | None = None) -> None:
        self.reply = reply
        self.error = error
        self.calls: list[dict[str, Any]] = []
        self.called = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> TokenOutput:
        self.calls.append({"request_id": request_id, "prompt_ids": prompt_ids, **sampling_params})
        self.called.set()
        await self.release.wait()
        if self.error is not None:
            raise self.error
        assert self.reply is not None
        return self.reply


def reply(
    tokens: list[int], steps: int | None = 3, reason: str | None = "completed"
) -> TokenOutput:
    logprobs = [-0.5] * len(tokens)
    return TokenOutput(
        token_ids=tokens,
        log_probs=logprobs,
        stop_reason=reason,
        extra_fields={"global_steps": steps},
    )


async def test_a_request_becomes_verls_sampling_params_and_its_reply_tokens() -> None:
    manager = ScriptedServerManager(reply([5, 6, 151645]))
    engine = VerlServerEngine(manager, backend="vllm")
    request = ModelRequest(
        input_ids=[1, 2],
        max_new_tokens=16,
        temperature=0.7,
        top_p=0.9,
        stop_token_ids=[151645],
        stop=["\n\n"],
        seed=11,
        session_id="s1",
    )
    response = await engine.generate(request)
    assert manager.calls == [
        {
            "request_id": "s1",
            "prompt_ids": [1, 2],
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": -1,
            "max_tokens": 16,
            "logprobs": True,
            "stop_token_ids": [151645],
            "stop": ["\n\n"],
            "seed": 11,
        }
    ]
    assert response.output_tokens == [5, 6, 151645]
    assert response.output_logprobs == [-0.5] * 3
    assert response.output_versions == [3] * 3  # verl's global_steps
    assert engine.version == 3
    assert response.stop_reason == StopReason.STOP


@pytest.mark.parametrize(
    ("backend", "param"),
    [
        pytest.param("vllm", "seed", id="vllm"),
        pytest.param("sglang", "sampling_seed", id="sglang"),
        pytest.param("trtllm", "seed", id="trtllm"),
    ],
)
def test_the_seed_goes_where_the_backend_reads_it(backend: str, param: str) -> None:
    engine = VerlServerEngine(ScriptedServerManager(), backend=backend)
    params = engine.sampling_params(ModelRequest(input_ids=[1], seed=5, top_k=20))
    assert params[param] == 5
    assert params["top_k"] == 20


@pytest.mark.parametrize(
    ("request_args", "message"),
    [
        pytest.param(
            {"constraint": Constraint(grammar="start: /[0-9]+/", reason="response_format")},
            "take no grammar",
            id="grammar",
        ),
        pytest.param({"policy": "tutor"}, "verl serves one policy", id="policy"),
    ],
)
async def test_what_verl_cannot_honour_is_refused(
    request_args: dict[str, Any], message: str
) -> None:
    manager = ScriptedServerManager(reply([5]))
    engine = VerlServerEngine(manager)
    with pytest.raises(InvalidRequest, match=message):
        await engine.generate(ModelRequest(input_ids=[1], **request_args))
    assert manager.calls == []


async def test_an_unknown_backend_takes_no_seed() -> None:
    engine = VerlServerEngine(ScriptedServerManager(reply([5])), backend="mystery")
    with pytest.raises(InvalidRequest, match="takes no seed"):
        await engine.generate(ModelRequest(input_ids=[1], seed=3))


@pytest.mark.parametrize(
    ("tokens", "reason", "expected"),
    [
        pytest.param([5, 6], "completed", StopReason.LENGTH, id="vllm-limit"),
        pytest.param([5], "completed", StopReason.STOP, id="vllm-stop-string"),
        pytest.param([5, 151645], "completed", StopReason.STOP, id="stop-token-at-limit"),
        pytest.param([5], "length", StopReason.LENGTH, id="sglang-length"),
        pytest.param([], "aborted", StopReason.ABORT, id="aborted"),
    ],
)
async def test_verls_stop_reasons(tokens: list[int], reason: str, expected: StopReason) -> None:
    engine = VerlServerEngine(ScriptedServerManager(reply(tokens, reason=reason)))
    request = ModelRequest(input_ids=[1], max_new_tokens=2, stop_token_ids=[151645])
    assert (await engine.generate(request)).stop_reason == expected


async def test_a_reply_before_verls_first_sync_keeps_the_version() -> None:
    engine = VerlServerEngine(ScriptedServerManager(reply([5], steps=None)), version=2)
    response = await engine.generate(ModelRequest(input_ids=[1]))
    assert response.output_versions == [2]


async def test_a_reply_without_logprobs_is_an_engine_error() -> None:
    missing = TokenOutput(token_ids=[5, 6], log_probs=None, extra_fields={"global_steps": 1})
    engine = VerlServerEngine(ScriptedServerManager(missing))
    with pytest.raises(EngineError, match="2 tokens with none logprobs"):
        await engine.generate(ModelRequest(input_ids=[1]))


async def test_a_failing_server_manager_is_an_engine_error() -> None:
    engine = VerlServerEngine(ScriptedServerManager(error=ValueError("prompt too long")))
    with pytest.raises(EngineError, match=r"server manager failed .*prompt too long") as caught:
        await engine.generate(ModelRequest(input_ids=[1]))
    assert isinstance(caught.value.__cause__, ValueError)


async def test_abort_ends_the_stream_as_aborted() -> None:
    manager = ScriptedServerManager(reply([5]))
    manager.release.clear()  # verl's reply never comes
    engine = VerlServerEngine(manager)
    request = ModelRequest(input_ids=[1])
    pending = asyncio.create_task(engine.generate(request))
    await manager.called.wait()
    await engine.abort(request.request_id)
    response = await pending
    assert response.stop_reason == StopReason.ABORT
    assert response.output_tokens == []


async def test_weights_are_verls_to_sync() -> None:
    engine = VerlServerEngine(ScriptedServerManager())
    with pytest.raises(InvalidRequest, match="syncs its rollout servers' weights itself"):
        await engine.update_weights({})


@pytest.mark.parametrize(
    ("rollout", "expected"),
    [
        pytest.param({"name": "vllm"}, LogprobConvention.PROCESSED, id="vllm-default"),
        pytest.param(
            {"name": "vllm", "logprobs_mode": "raw_logprobs"}, LogprobConvention.RAW, id="vllm-raw"
        ),
        pytest.param({"name": "sglang"}, LogprobConvention.TEMPERATURE_SCALED, id="sglang"),
    ],
)
def test_the_logprob_convention_follows_verls_rollout(
    rollout: dict[str, str], expected: LogprobConvention
) -> None:
    assert logprob_convention_of(rollout) == expected


def test_logits_modes_are_refused() -> None:
    from rltap.config import ConfigError

    with pytest.raises(ConfigError, match="returns logits, not logprobs"):
        logprob_convention_of({"name": "vllm", "logprobs_mode": "raw_logits"})
