"""The embedded engine serving several LoRA adapters (one per policy) over one base model: one
forward mixes rows of every adapter and of the base model, each request's tokens and logprobs
are those of its adapter alone (within 1e-5), and each policy has its own version."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
import torch

from rltap.engines._prefill import plan_prefill
from rltap.engines.base import DEFAULT_POLICY, AdapterWeights
from rltap.engines.lora import adapter_of
from rltap.engines.transformers import TransformersEngine
from rltap.record.errors import EngineError
from rltap.record.types import ModelRequest, ModelResponse
from rltap.testing.adapters import LINEAR_TARGETS, random_adapter

peft = pytest.importorskip("peft")

PROMPT = [9707, 11, 1879, 0, 1096, 374, 264, 1273, 13]  # "Hello, world! This is a test."


def renamed(adapter: AdapterWeights, name: str) -> AdapterWeights:
    """The same adapter under another name (its tensors renamed as peft would)."""
    tensors = {
        key.replace(f".{adapter.name}.", f".{name}."): t for key, t in adapter.tensors.items()
    }
    return AdapterWeights(adapter.config, tensors, name=name)


@pytest.fixture
async def make_engine(tiny_model: Any) -> AsyncIterator[Callable[..., TransformersEngine]]:
    """A started TransformersEngine over a copy of the tiny model (no eos stop), closed after
    the test."""
    engines: list[TransformersEngine] = []

    async def make(**kwargs: Any) -> TransformersEngine:
        kwargs.setdefault("eos_token_ids", [])
        engines.append(TransformersEngine(copy.deepcopy(tiny_model), **kwargs))
        await engines[-1].start()
        return engines[-1]

    yield make  # type: ignore[misc]
    for engine in engines:
        await engine.close()


def requests(policies: Sequence[str | None]) -> list[ModelRequest]:
    """Per policy: the same prompt (which must not share a prefill row across adapters) and
    two prompts of their own lengths (padding in the batched prefill), greedy."""
    return [
        ModelRequest(input_ids=list(ids), max_new_tokens=8, temperature=0.0, policy=policy)
        for i, policy in enumerate(policies)
        for ids in (PROMPT, PROMPT[: 3 + i], (PROMPT * 2)[i : 12 + 2 * i])
    ]


def max_diff(a: ModelResponse, b: ModelResponse) -> float:
    pairs = zip(a.output_logprobs, b.output_logprobs, strict=True)
    return max(abs(x - y) for x, y in pairs)


def record_adapter_names(model: Any) -> tuple[list[tuple[list[str] | None, int]], Any]:
    """The `adapter_names` each forward hands the first LoRA layer of `model` (None: the plain
    forward) with the tokens it feeds per row (1: a decode step), and the hook's handle."""
    layer = next(m for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer))
    seen: list[tuple[list[str] | None, int]] = []

    def record(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        names = kwargs.get("adapter_names")
        seen.append((None if names is None else list(names), int(args[0].shape[1])))

    # After the forward: the arguments the engine's pre-hook passed.
    return seen, layer.register_forward_hook(record, with_kwargs=True)


@pytest.mark.slow  # seconds of decoding: make test runs it, make check does not
async def test_a_mixed_batch_gives_each_request_its_adapter_alone(
    make_engine: Callable[..., Any], tiny_model: Any
) -> None:
    tutor, student = (
        random_adapter(tiny_model, "tutor", 1),
        random_adapter(tiny_model, "student", 2),
    )
    mixed = await make_engine()
    assert await mixed.update_weights(tutor, version=3) == 3
    assert await mixed.update_weights(student, version=7) == 7
    # The references: each adapter alone as a single-policy run's, and the base model.
    alone: dict[str | None, TransformersEngine] = {None: await make_engine()}
    for adapter in (tutor, student):
        alone[adapter.name] = await make_engine()
        await alone[adapter.name].update_weights(renamed(adapter, DEFAULT_POLICY))
    batch = requests(["tutor", "student", None])
    expected = [await alone[r.policy].generate(replace_policy(r)) for r in batch]

    seen, hook = record_adapter_names(mixed.model)
    try:
        got = await asyncio.gather(*map(mixed.generate, batch))
    finally:
        hook.remove()
    for req, want, have in zip(batch, expected, got, strict=True):
        assert have.output_tokens == want.output_tokens, req.policy
        assert max_diff(have, want) <= 1e-5, req.policy
        assert have.output_versions == [{"tutor": 3, "student": 7, None: 0}[req.policy]] * 8
    # One prefill forward held every prompt, its shared one once per adapter; the decode steps
    # mixed all nine rows.
    prefill, width = seen[0]
    assert width > 1
    assert prefill is not None
    assert sorted(prefill) == sorted(["tutor"] * 3 + ["student"] * 3 + ["__base__"] * 3)
    assert [width for _, width in seen[1:]] == [1] * 8  # a decode step per output token
    assert all(names is not None and len(names) == 9 for names, _ in seen[1:])
    # The adapters matter: the replies to the same prompt differ (tutor, student, base).
    assert max_diff(got[0], got[3]) > 1e-2
    assert max_diff(got[0], got[6]) > 1e-2
    assert max_diff(got[3], got[6]) > 1e-2


def replace_policy(request: ModelRequest) -> ModelRequest:
    """`request` for a reference engine, whose adapter (if any) is the single-policy one."""
    return dataclasses.replace(request, policy=None, request_id=request.request_id + "-alone")


async def test_each_policy_has_its_own_version(
    make_engine: Callable[..., Any], tiny_model: Any
) -> None:
    engine = await make_engine(version=2)
    tutor = random_adapter(tiny_model, "tutor", 1)
    first = ModelRequest(input_ids=PROMPT, max_new_tokens=3, temperature=0.0, policy="tutor")
    # Before its first update a policy generates with the base model (a new adapter adds zero).
    before = await engine.generate(first)
    base = await engine.generate(dataclasses.replace(first, policy=None))
    assert before.output_tokens == base.output_tokens
    assert before.output_versions == [2, 2, 2]
    assert await engine.update_weights(tutor) == 3
    assert await engine.update_weights(tutor, version=9) == 9
    assert (engine.version, engine.policy_version("tutor")) == (2, 9)
    assert engine.policy_version("student") == 2  # none yet: the starting version
    engine.set_policy_version("student", 11)
    assert engine.policy_version("student") == 11
    assert (await engine.generate(first)).output_versions == [9, 9, 9]
    assert (await engine.generate(dataclasses.replace(first, policy=None))).output_versions == [
        2
    ] * 3
    # A full update moves the base version only.
    assert await engine.update_weights({}, partial=True) == 3
    assert (engine.version, engine.policy_version("tutor")) == (3, 9)


@pytest.mark.slow  # seconds of decoding: make test runs it, make check does not
async def test_an_update_rebuilds_only_its_policys_rows(
    make_engine: Callable[..., Any], tiny_model: Any
) -> None:
    tutor, student = (
        random_adapter(tiny_model, "tutor", 1),
        random_adapter(tiny_model, "student", 2),
    )
    engine = await make_engine()
    await engine.update_weights(student)
    reference = await make_engine()
    await reference.update_weights(renamed(student, DEFAULT_POLICY))
    ask = ModelRequest(input_ids=PROMPT, max_new_tokens=24, temperature=0.0, policy="student")
    want = await reference.generate(dataclasses.replace(ask, policy=None))

    tutor_ask = dataclasses.replace(ask, policy="tutor", request_id="tutor")
    streams = [engine.stream(ask), engine.stream(tutor_ask)]
    chunks: list[list[Any]] = [[await anext(s)] for s in streams]
    seen, hook = record_adapter_names(engine.model)
    try:
        await engine.update_weights(tutor)  # the tutor row moves to its new adapter
        for stream, got in zip(streams, chunks, strict=True):
            got.extend([chunk async for chunk in stream])
    finally:
        hook.remove()
    student_reply = ModelResponse(input_tokens=list(PROMPT))
    for chunk in chunks[0]:
        student_reply.extend(chunk)
    assert student_reply.output_tokens == want.output_tokens
    assert max_diff(student_reply, want) <= 1e-5
    assert student_reply.output_versions == [1] * 24
    tutor_versions = [v for chunk in chunks[1] for v in chunk.versions]
    assert tutor_versions[0] == 0
    assert tutor_versions[-1] == 1
    # Only the tutor's row was prefilled again.
    assert [names for names, width in seen if width > 1] == [["tutor"]]


def test_requests_of_different_adapters_never_share_a_prefill_row() -> None:
    prompts = [PROMPT, PROMPT, PROMPT, PROMPT[:4]]
    (group,) = plan_prefill(prompts, 8, 1024, ["tutor", "student", "tutor", "__base__"])
    assert group.prompts == [tuple(PROMPT[:4]), tuple(PROMPT), tuple(PROMPT)]
    assert group.adapters == ["__base__", "tutor", "student"]
    assert group.members == [0, 1, 2, 3]
    assert group.source == [1, 2, 1, 0]
    (plain,) = plan_prefill(prompts, 8, 1024)
    assert plain.adapters is None
    assert len(plain.prompts) == 2


async def test_an_adapter_misnamed_or_unmixable_is_refused(
    make_engine: Callable[..., Any], tiny_model: Any
) -> None:
    engine = await make_engine()
    tutor = random_adapter(tiny_model, "tutor", 1)
    mislabelled = AdapterWeights(tutor.config, tutor.tensors, name="student")
    with pytest.raises(EngineError, match="tensors of another adapter name"):
        await engine.update_weights(mislabelled)
    dora = copy.deepcopy(tutor.config)
    dora.use_dora = True
    with pytest.raises(EngineError, match="DoRA"):
        await engine.update_weights(AdapterWeights(dora, tutor.tensors, name="tutor"))
    assert engine.policy_version("student") == 0
    assert engine.policy_version("tutor") == 0


async def test_the_adapters_of_one_peft_model_serve_as_peft_mixes_them(
    make_engine: Callable[..., Any], tiny_model: Any
) -> None:
    # A trainer holding every policy's adapter in one peft model sends each by name.
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=LINEAR_TARGETS)
    trainer = peft.get_peft_model(copy.deepcopy(tiny_model), config, adapter_name="tutor")
    trainer.add_adapter("student", copy.deepcopy(config))
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, parameter in trainer.named_parameters():
            if ".lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    trainer.eval()
    engine = await make_engine()
    for name in ("tutor", "student"):
        adapter = adapter_of(trainer, name)
        assert adapter is not None
        assert adapter.name == name
        assert {key.split(".lora_")[1].split(".")[1] for key in adapter.tensors} == {name}
        await engine.update_weights(adapter)
    replies = await asyncio.gather(*map(engine.generate, requests(["tutor", "student", None])))
    for reply, policy in zip(replies[::3], ["tutor", "student", "__base__"], strict=True):
        ids = torch.tensor([reply.input_tokens + reply.output_tokens])
        with torch.no_grad():
            logits = trainer(input_ids=ids, adapter_names=[policy]).logits[0]
        fresh = torch.log_softmax(logits[len(reply.input_tokens) - 1 : -1], dim=-1)
        fresh = fresh.gather(1, torch.tensor(reply.output_tokens)[:, None]).squeeze(1)
        assert (fresh - torch.tensor(reply.output_logprobs)).abs().max() <= 1e-5, policy
