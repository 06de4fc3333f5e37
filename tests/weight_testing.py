"""What the weight-update tests share: a small Qwen2, a "trained" copy of a model and the
logprob check against it, and a fake weight-reload server.

The server is real HTTP on 127.0.0.1 answering fixed replies per route, for the vLLM
development API and SGLang's `/update_weights_from_disk` (neither server runs here). Each
request is recorded as (method, path, query, JSON body), and with `folder` set the file names
in it at that moment, so a test sees whether the weights were saved before the server was
asked to load them. A route it does not know answers 404, as a vLLM server without
`VLLM_SERVER_DEV_MODE=1` does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from aiohttp import web
from transformers import Qwen2Config, Qwen2ForCausalLM

from rltap.record.types import ModelResponse

__all__ = ["VLLM_DEV_ROUTES", "ReloadServer", "max_logprob_diff", "perturbed", "small_qwen2"]


def small_qwen2(*, tied: bool = False) -> Any:
    """A Qwen2 small enough to save in milliseconds (`tied`: output layer = embeddings)."""
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).eval()


def perturbed(model: Any, seed: int = 0) -> Any:
    """A copy of `model` with every weight moved by noise: the "trained" model."""
    moved = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return moved


def max_logprob_diff(model: Any, response: ModelResponse, part: slice = slice(None)) -> float:
    """Max abs difference between `response`'s output logprobs (`part` of them) and `model`'s
    own logprob (T=1) of each output token."""
    sequence = torch.tensor([response.input_tokens + response.output_tokens])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(sequence).logits[0, :-1].float(), dim=-1)
    picked = logprobs.gather(1, sequence[0, 1:, None])[:, 0][len(response.input_tokens) - 1 :]
    got = torch.tensor(response.output_logprobs[part])
    return float((got - picked[part]).abs().max())


VLLM_DEV_ROUTES: dict[str, tuple[int, Any]] = {
    "/is_paused": (200, {"is_paused": False}),
    "/pause": (200, {"status": "paused"}),
    "/collective_rpc": (200, {"results": [None]}),
    "/reset_prefix_cache": (200, {"success": True}),
    "/update_weight_version": (200, {"success": True, "new_version": "5"}),
    "/resume": (200, {"status": "resumed"}),
}


class ReloadServer:
    """Answers each route of `routes` with its (status, JSON reply); `url` once entered."""

    def __init__(self, routes: dict[str, tuple[int, Any]]) -> None:
        self.routes = routes
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.files_seen: list[set[str]] = []  # the weight folder's files at each request
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

    def paths(self) -> list[str]:
        return [path for _, path, _, _ in self.requests]

    async def __aenter__(self) -> ReloadServer:
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
