"""vLLM's weight transfer (`rltap.engines.vllm_transfer`) against a fake server speaking its routes
(`rltap.testing.fakes.vllm_transfer`, with the in-process transport that hands it the tensors):
the phases in vLLM's order, chunks bounded and complete with the trainer's exact values, a
failure in each phase giving a clear error and no half-moved version, requests in flight
keeping their version, and the trainer side (`rltap.train.sync`) streaming a model into it.

The real transports (NCCL, CUDA IPC) need vllm and a GPU: bench/gpu_weight_transfer.sh.
"""

from __future__ import annotations

import asyncio
import base64
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from weight_testing import perturbed, small_qwen2

from rltap.engines.base import NamedTensors, WeightFolder
from rltap.engines.vllm import VLLMEngine
from rltap.engines.vllm_transfer import TransferPhases, VLLMWeightTransfer, rendezvous_address
from rltap.record.errors import EngineError, InvalidRequest
from rltap.record.types import ModelRequest
from rltap.testing.fakes.vllm import FakeVLLM
from rltap.testing.fakes.vllm_transfer import FakeTransferVLLM
from rltap.train.gather import named_tensors
from rltap.train.sync import weight_sync

SYNC = ["pause", "start_weight_update"]
END = ["finish_weight_update", "reset_prefix_cache", "resume"]


def _engine(server: FakeTransferVLLM, chunk_bytes: int = 4096, **kwargs: Any) -> VLLMEngine:
    return VLLMEngine(server.url, transfer=server.transfer(chunk_bytes), **kwargs)


def _state(model: Any) -> dict[str, torch.Tensor]:
    """The tensors a transfer sends: the state dict without tied duplicates."""
    return {spec.name: model.state_dict()[spec.name] for spec in named_tensors(model).specs}


def _assert_weights(server: FakeTransferVLLM, model: Any) -> None:
    expected = _state(model)
    assert server.weights.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(server.weights[name], tensor), name


async def test_one_update_runs_vllms_phases_in_order_and_joins_once() -> None:
    trainer = perturbed(small_qwen2())
    async with FakeTransferVLLM() as server:
        engine = _engine(server, chunk_bytes=1 << 20)
        assert await engine.update_weights(named_tensors(trainer), version=3) == 3
        assert server.phases() == ["init_weight_transfer_engine", *SYNC, "update_weights", *END]
        assert server.calls[1]["query"] == {"mode": "wait"}
        assert server.calls[-3]["body"] == {"weight_version": "3"}
        assert server.weight_version == "3"
        assert not server.paused
        _assert_weights(server, trainer)

        server.calls.clear()
        assert await engine.update_weights(named_tensors(small_qwen2())) == 4
        assert server.phases() == [*SYNC, "update_weights", *END]  # joined already
        _assert_weights(server, small_qwen2())
        await engine.close()


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
async def test_chunks_are_bounded_and_hold_every_tensor_once(tied: bool) -> None:
    trainer = perturbed(small_qwen2(tied=tied))
    specs = {spec.name: spec for spec in named_tensors(trainer).specs}
    limit = 2048
    async with FakeTransferVLLM() as server:
        engine = _engine(server, chunk_bytes=limit)
        await engine.update_weights(named_tensors(trainer), version=1)
        await engine.close()
    sizes = [sum(specs[name].nbytes for name in chunk) for chunk in server.chunks]
    largest = max(spec.nbytes for spec in specs.values())
    assert largest > limit  # the embedding goes alone; every other chunk fits the bound
    assert len(server.chunks) > 3
    pairs = zip(sizes, server.chunks, strict=True)
    assert all(size <= limit or len(chunk) == 1 for size, chunk in pairs)
    sent = [name for chunk in server.chunks for name in chunk]
    assert sent == list(specs)  # each once, in the model's order
    assert ("lm_head.weight" in sent) is not tied  # a tied output layer is the embedding
    _assert_weights(server, trainer)


# phase -> (what the error says, whether vLLM is left paused)
FAILURES = {
    "init_weight_transfer_engine": ("was not paused and serves its weights as before", False),
    "pause": ("resumed it: it serves its weights as before", False),
    "start_weight_update": ("stays paused \\(its weights may be half updated\\)", True),
    "update_weights": ("stays paused \\(its weights may be half updated\\)", True),
    "reset_prefix_cache": ("holds the weights of version 2, its prefix cache KV of the old", True),
    "resume": ("holds the weights of version 2 but rltap's version did not move", True),
}


@pytest.mark.parametrize("phase", list(FAILURES))
async def test_a_failed_phase_names_it_keeps_the_version_and_the_next_update_works(
    phase: str,
) -> None:
    error, paused = FAILURES[phase]
    trainer = perturbed(small_qwen2())
    async with FakeTransferVLLM() as server:
        engine = _engine(server, version=1)
        server.fail[phase] = 1
        with pytest.raises(EngineError, match=rf"failed at {phase}: .*{error}") as failure:
            await engine.update_weights(named_tensors(trainer))
        assert "the fake failed" in str(failure.value) or "on purpose" in str(failure.value)
        assert engine.version == 1
        assert server.paused is paused
        if phase not in ("reset_prefix_cache", "resume"):
            assert server.weight_version is None  # vLLM never labelled half-moved weights

        assert await engine.update_weights(named_tensors(trainer)) == 2
        assert engine.version == 2
        assert not server.paused
        assert server.weight_version == "2"
        _assert_weights(server, trainer)
        await engine.close()


async def test_a_failed_transfer_drops_the_connection_and_joins_anew() -> None:
    async with FakeTransferVLLM() as server:
        transport = server.transport()
        transfer = VLLMWeightTransfer("ipc", transport=transport)
        engine = VLLMEngine(server.url, transfer=transfer)
        server.fail["update_weights"] = 1
        with pytest.raises(EngineError, match="failed at update_weights"):
            await engine.update_weights(named_tensors(small_qwen2()))
        assert transport.closed == 1
        server.calls.clear()
        await engine.update_weights(named_tensors(small_qwen2()))
        assert server.phases()[:2] == ["init_weight_transfer_engine", "pause"]
        await engine.close()


async def test_an_ipc_update_refused_asks_whether_vllm_may_unpickle_handles() -> None:
    async with FakeTransferVLLM() as server:
        engine = VLLMEngine(server.url, transfer=server.transfer(backend="ipc"))
        server.fail["update_weights"] = 1
        with pytest.raises(EngineError, match="VLLM_ALLOW_INSECURE_SERIALIZATION=1 set"):
            await engine.update_weights(named_tensors(small_qwen2()), version=1)
        await engine.close()


async def test_a_failed_finish_says_vllm_may_refuse_the_next_start() -> None:
    async with FakeTransferVLLM() as server:
        engine = _engine(server)
        server.fail["finish_weight_update"] = 1
        with pytest.raises(EngineError, match=r"failed at finish_weight_update.*restart"):
            await engine.update_weights(named_tensors(small_qwen2()), version=1)
        assert engine.version == 0
        assert server.paused
        # vLLM's workers stay inside the update: the next one fails at its start, clearly.
        with pytest.raises(EngineError, match=r"failed at start_weight_update.*already active"):
            await engine.update_weights(named_tensors(small_qwen2()), version=1)
        assert engine.version == 0
        await engine.close()


async def test_a_transport_failure_is_an_engine_error_naming_the_phase() -> None:
    def broken() -> Any:
        yield "model.embed_tokens.weight", torch.zeros(2)
        raise OSError("the trainer's device went away")

    specs = named_tensors(small_qwen2()).specs
    async with FakeTransferVLLM() as server:
        engine = _engine(server)
        with pytest.raises(EngineError, match="failed at start_weight_update: the nccl transfer"):
            await engine.update_weights(NamedTensors(specs, broken), version=1)
        assert engine.version == 0
        assert server.paused
        await engine.close()


async def test_requests_in_flight_keep_their_version_and_held_ones_get_the_new_one() -> None:
    prompt = ModelRequest(input_ids=[1, 2, 3], max_new_tokens=4)
    async with FakeTransferVLLM(latency=0.3) as server:
        engine = _engine(server, version=0)
        before = asyncio.create_task(engine.generate(prompt))
        await asyncio.sleep(0.1)  # in flight on the old weights
        update = asyncio.create_task(engine.update_weights(named_tensors(small_qwen2())))
        await server.wait_paused()
        after = asyncio.create_task(engine.generate(ModelRequest(input_ids=[4], max_new_tokens=4)))
        await asyncio.sleep(0.05)
        assert not after.done()  # held
        assert not update.done()  # waiting for `before`
        old, version, new = await asyncio.gather(before, update, after)
        await engine.close()
    assert version == 1
    assert old.output_versions == [0] * 4
    assert new.output_versions == [1] * 4
    completions = [call["weight_version"] for call in server.calls if call["phase"] == "completion"]
    assert completions == [None, "1"]  # the held request ran on the new weights


async def test_two_updates_at_once_run_one_after_the_other() -> None:
    async with FakeTransferVLLM() as server:
        engine = _engine(server, chunk_bytes=1 << 20)
        first, second = named_tensors(small_qwen2()), named_tensors(perturbed(small_qwen2()))
        versions = await asyncio.gather(
            engine.update_weights(first, version=1), engine.update_weights(second, version=2)
        )
        await engine.close()
    assert versions == [1, 2]
    one = [*SYNC, "update_weights", *END]
    assert server.phases() == ["init_weight_transfer_engine", *one, *one]
    assert server.weight_version == "2"


async def test_ipc_handles_travel_pickled_in_the_field_vllm_reads_over_http() -> None:
    handles = [{"GPU-0": ("storage", 7, (2, 3))}]
    async with FakeTransferVLLM() as server:
        engine = _engine(server)
        phases = TransferPhases(server.url, "ipc")
        phases.bind(engine._client.detached(), version=1)
        info = {"names": ["w"], "dtype_names": ["float32"], "shapes": [[2, 3]]}
        with pytest.raises(EngineError):  # no update is active: the fake refuses it
            await asyncio.to_thread(phases.update_weights, {**info, "ipc_handles": handles})
    sent = server.calls[-1]["body"]["update_info"]
    assert "ipc_handles" not in sent
    assert pickle.loads(base64.b64decode(sent["ipc_handles_pickled"])) == handles


async def test_the_nccl_group_size_is_one_trainer_plus_vllms_workers() -> None:
    async with FakeTransferVLLM(world_size=4) as server:
        engine = _engine(server)
        phases = TransferPhases(server.url, "nccl")
        phases.bind(engine._client.detached(), version=1)
        assert await asyncio.to_thread(phases.world_size) == 4
    assert server.phases() == ["get_world_size"]


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "http://localhost:8000/v1", "http://[::1]:8000"]
)
def test_a_server_on_this_machine_joins_the_trainer_on_the_loopback(url: str) -> None:
    assert rendezvous_address(url) == "127.0.0.1"


async def test_without_the_transfer_routes_the_error_says_how_to_start_vllm() -> None:
    async with FakeVLLM() as server:
        engine = VLLMEngine(
            server.url, transfer=VLLMWeightTransfer("ipc", transport=_NoTransport())
        )
        with pytest.raises(EngineError, match=r"--weight-transfer-config.*ipc.*not paused"):
            await engine.update_weights(named_tensors(small_qwen2()), version=1)
        assert engine.version == 0


async def test_vllms_transport_without_vllm_installed_fails_before_pausing() -> None:
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vllm is installed here: its transport needs a GPU (the bench runs it)")
    async with FakeTransferVLLM() as server:
        engine = VLLMEngine(server.url, weight_transfer="nccl")
        with pytest.raises(EngineError, match=r"install vllm.*not paused"):
            await engine.update_weights(named_tensors(small_qwen2()), version=1)
        assert server.phases() == []
        assert engine.version == 0


async def test_named_tensors_go_only_to_an_engine_that_takes_them(tmp_path: Path) -> None:
    source = named_tensors(small_qwen2())
    folder_engine = VLLMEngine("http://127.0.0.1:9", model="m")
    assert not folder_engine.takes_named_tensors
    with pytest.raises(InvalidRequest, match="not NamedTensors"):
        await folder_engine.update_weights(source)
    # A folder still reloads on a transfer engine: the fallback (Ray actors, older vLLM).
    async with FakeVLLM(record=tmp_path / "calls.jsonl") as server:
        transfer = VLLMWeightTransfer("nccl", transport=_NoTransport())
        engine = VLLMEngine(server.url, weight_transfer="nccl", transfer=transfer)
        assert engine.takes_named_tensors
        assert await engine.update_weights(WeightFolder(tmp_path), version=2) == 2
    assert b"/collective_rpc" in (tmp_path / "calls.jsonl").read_bytes()


async def test_the_trainer_sync_streams_the_model_without_saving_it(tmp_path: Path) -> None:
    trainer = perturbed(small_qwen2(), seed=3)
    async with FakeTransferVLLM() as server:
        engine = _engine(server, chunk_bytes=1024)
        await weight_sync(engine, tmp_path / "sync").push(trainer, 7)
        assert engine.version == 7
        assert server.weight_version == "7"
        _assert_weights(server, trainer)
        await engine.close()
    assert not (tmp_path / "sync").exists()


class _NoTransport:
    """A transport for tests that never get past the server's routes."""

    def connect(self, phases: TransferPhases, source: NamedTensors) -> None:
        phases.init_weight_transfer_engine({})

    def send(self, source: NamedTensors) -> None:
        raise AssertionError("nothing is sent")

    def close(self) -> None:
        pass


def test_the_engine_flag_picks_the_transfer() -> None:
    from rltap.config.serve import EngineConfig
    from rltap.engines.factory import create_engine

    url = "http://127.0.0.1:9"
    engine = create_engine(EngineConfig(engine="vllm", url=url, weight_transfer="ipc"))
    assert engine.takes_named_tensors  # type: ignore[attr-defined]
    assert not create_engine(EngineConfig(engine="vllm", url=url)).takes_named_tensors  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown vLLM weight transfer 'rdma'"):
        VLLMEngine(url, weight_transfer="rdma")
