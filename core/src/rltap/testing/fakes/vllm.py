"""An instant vLLM-compatible server: `/v1/completions` answers at once with fixed tokens.

It follows the fields rltap's vLLM engine reads (token-id prompt in, `prompt_token_ids`,
`token_ids`, `logprobs.token_logprobs`, `finish_reason`; SSE when `stream`), so a benchmark through
the proxy measures only the proxy's own cost.

With `record` (`--record FILE`) it also answers the development API a server started with
`VLLM_SERVER_DEV_MODE=1` has, which rltap's weight sync drives (`/is_paused`, `/pause`,
`/collective_rpc`, `/reset_prefix_cache`, `/update_weight_version`, `/resume`; nothing is
reloaded), and appends each such request to FILE as a JSON line {"method", "path", "query",
"body"}, with "files" (the weight folder's file names) for `/collective_rpc`.

With `max_lora_rank` (`--max-lora-rank N`) it also serves LoRA adapters as a vLLM server started
with `--enable-lora --max-lora-rank N` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` does:
`POST /v1/load_lora_adapter` ({"lora_name", "lora_path"}: the folder must hold peft's
`adapter_config.json` with `r` <= N, and the name must be new, else 400) and
`POST /v1/unload_lora_adapter` ({"lora_name"}; 404 for a name not loaded), and a completion's
`model` must be the served model or a loaded adapter (else 404, as vLLM answers). Replies are
the same fixed tokens whatever the adapter. With `record` these calls are logged too (the
adapter folder's file names as "files"), and each completion naming an adapter as
{"path": "/v1/completions", "model": name}.

A fake can also play a slow or failing server (an engine router's tests and
`bench/engine_router.py`): `delay` (`--delay SECONDS`) makes each completion take that long,
one at a time (a server with one slot: N calls at once take N x `delay`), so the server is the
bottleneck; `healthy = False` (or, for the process,
`--health-file PATH` existing) makes `GET /health` answer 503 while completions still work;
`kill()` ends the server as a crash would (completions in flight are cut, new connections
refused) and `start()` serves it again on the same port. `completions` counts the completions
it answered.

Usage:
    async with FakeVLLM(record=tmp_path / "calls.jsonl") as server:
        engine = VLLMEngine(server.url)

As a process of its own: `python -m rltap.testing.fakes.vllm --port 8100 [--record FILE]
[--max-lora-rank N] [--delay SECONDS] [--health-file PATH]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiohttp import web

from rltap.testing.fakes._serving import ServedApp, serve_on_free_port

__all__ = ["REPLY_IDS", "FakeControls", "FakeVLLM", "main", "make_app"]

# "Hello from the instant engine." in the Qwen vocabulary, then <|im_end|>.
REPLY_IDS = [9707, 504, 279, 9690, 4712, 13, 151645]


def _choice(prompt: list[int], ids: list[int], finish: str | None) -> dict[str, object]:
    return {
        "index": 0,
        "text": "",
        "prompt_token_ids": prompt,
        "token_ids": ids,
        "logprobs": {"token_logprobs": [-0.5] * len(ids), "tokens": [f"token_id:{i}" for i in ids]},
        "finish_reason": finish,
    }


def _error(status: int, message: str) -> web.Response:
    kind = "NotFoundError" if status == 404 else "BadRequestError"
    error = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.Response(body=orjson.dumps(error), status=status, content_type="application/json")


@dataclass(slots=True)
class FakeControls:
    """How the fake behaves, changeable while it serves (module docstring)."""

    delay: float = 0.0
    healthy: bool = True
    health_file: Path | None = None
    completions: int = 0
    # The one slot a completion with a delay holds while it waits.
    slot: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The completions being answered: what `FakeVLLM.kill` cuts.
    running: dict[asyncio.Task[object], web.Request] = field(default_factory=dict)

    @property
    def answers_health(self) -> bool:
        return self.healthy and not (self.health_file is not None and self.health_file.exists())


CONTROLS = web.AppKey("controls", FakeControls)


async def completions(request: web.Request) -> web.StreamResponse:
    controls = request.app[CONTROLS]
    task = asyncio.current_task()
    assert task is not None
    controls.running[task] = request
    try:
        if controls.delay > 0:
            async with controls.slot:
                await asyncio.sleep(controls.delay)
        response = await _complete(request)
    finally:
        del controls.running[task]
    controls.completions += 1
    return response


async def _complete(request: web.Request) -> web.StreamResponse:
    body = orjson.loads(await request.read())
    model = body.get("model", "fake")
    adapters: dict[str, str] | None = request.app.get(ADAPTERS)
    if adapters is not None and model != "fake":
        if model not in adapters:
            return _error(404, f"The model `{model}` does not exist.")
        record = request.app.get(RECORD)
        if record is not None:
            _log(record, {"path": request.path, "model": model})
    prompt = body["prompt"]
    ids = REPLY_IDS[: int(body.get("max_tokens") or len(REPLY_IDS))]
    finish = "stop" if len(ids) == len(REPLY_IDS) else "length"
    created = int(time.time())
    if not body.get("stream"):
        data = {"id": "cmpl-fake", "object": "text_completion", "created": created, "model": "fake"}
        data["choices"] = [_choice(prompt, ids, finish)]
        return web.Response(body=orjson.dumps(data), content_type="application/json")
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    head = {"id": "cmpl-fake", "object": "text_completion", "created": created, "model": "fake"}
    for position, token in enumerate(ids):
        last = position == len(ids) - 1
        event = {**head, "choices": [_choice(prompt, [token], finish if last else None)]}
        await response.write(b"data: " + orjson.dumps(event) + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def models(request: web.Request) -> web.Response:
    data = {"object": "list", "data": [{"id": "fake", "object": "model", "max_model_len": 32768}]}
    return web.Response(body=orjson.dumps(data), content_type="application/json")


async def health(request: web.Request) -> web.Response:
    if not request.app[CONTROLS].answers_health:
        return web.Response(status=503, text="unhealthy (FakeVLLM told so)")
    return web.Response(text="")


DEV_REPLIES: dict[str, dict[str, object]] = {
    "/is_paused": {"is_paused": False},
    "/pause": {"status": "paused"},
    "/collective_rpc": {"results": [None]},
    "/reset_prefix_cache": {"success": True},
    "/update_weight_version": {"success": True},
    "/resume": {"status": "resumed"},
}


def dev_api(record: Path) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        raw = await request.read()
        body = orjson.loads(raw) if raw.strip() else None
        query = dict(request.query)
        _log(record, {"method": request.method, "path": request.path, "query": query, "body": body})
        reply = orjson.dumps(DEV_REPLIES[request.path])
        return web.Response(body=reply, content_type="application/json")

    return handle


def _log(record: Path, line: dict[str, object]) -> None:
    body = line.get("body")
    if line["path"] == "/collective_rpc" and isinstance(body, dict):
        folder = Path(body["kwargs"]["weights_path"])
        line["files"] = sorted(p.name for p in folder.iterdir())
    with record.open("ab") as handle:
        handle.write(orjson.dumps(line) + b"\n")


ADAPTERS = web.AppKey("adapters", dict)
RECORD = web.AppKey("record", Path)
MAX_LORA_RANK = web.AppKey("max_lora_rank", int)


async def load_lora_adapter(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    name, folder = body["lora_name"], Path(body["lora_path"])
    _log_lora(request, body, folder)
    adapters = request.app[ADAPTERS]
    if name in adapters:
        return _error(400, f"The lora adapter '{name}' has already been loaded.")
    config_file = folder / "adapter_config.json"
    if not config_file.is_file():
        return _error(400, f"No adapter found for {folder}")
    rank = int(orjson.loads(config_file.read_bytes())["r"])
    if rank > request.app[MAX_LORA_RANK]:
        limit = request.app[MAX_LORA_RANK]
        return _error(400, f"LoRA rank {rank} is greater than max_lora_rank {limit}.")
    adapters[name] = str(folder)
    return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")


async def unload_lora_adapter(request: web.Request) -> web.Response:
    body = orjson.loads(await request.read())
    _log_lora(request, body, None)
    name = body["lora_name"]
    if request.app[ADAPTERS].pop(name, None) is None:
        return _error(404, f"The lora adapter '{name}' cannot be found.")
    return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")


def _log_lora(request: web.Request, body: dict[str, object], folder: Path | None) -> None:
    record = request.app.get(RECORD)
    if record is None:
        return
    line: dict[str, object] = {"method": "POST", "path": request.path, "body": body}
    if folder is not None and folder.is_dir():
        line["files"] = sorted(p.name for p in folder.iterdir())
    _log(record, line)


def make_app(
    record: Path | None = None,
    max_lora_rank: int | None = None,
    controls: FakeControls | None = None,
) -> web.Application:
    """The fake's aiohttp app (module docstring: what `record`, `max_lora_rank` and
    `controls` add)."""
    app = web.Application()
    app[CONTROLS] = controls or FakeControls()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    if record is not None:
        app[RECORD] = record
        for path in DEV_REPLIES:
            app.router.add_route("GET" if path == "/is_paused" else "POST", path, dev_api(record))
    if max_lora_rank is not None:
        app[ADAPTERS] = {}
        app[MAX_LORA_RANK] = max_lora_rank
        app.router.add_post("/v1/load_lora_adapter", load_lora_adapter)
        app.router.add_post("/v1/unload_lora_adapter", unload_lora_adapter)
    return app


class FakeVLLM(ServedApp):
    """The fake served in this process on a free 127.0.0.1 port; `url` is its root once started.
    `delay`, `healthy` and `completions` are its `FakeControls`' (module docstring).

    Usage:
        async with FakeVLLM(max_lora_rank=8) as server:
            engine = VLLMEngine(server.url)
    """

    def __init__(
        self, *, record: Path | None = None, max_lora_rank: int | None = None, delay: float = 0.0
    ) -> None:
        self.record = record
        self.max_lora_rank = max_lora_rank
        self.controls = FakeControls(delay=delay)
        self._port = 0

    @property
    def delay(self) -> float:
        return self.controls.delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self.controls.delay = seconds

    @property
    def healthy(self) -> bool:
        return self.controls.healthy

    @healthy.setter
    def healthy(self, value: bool) -> None:
        self.controls.healthy = value

    @property
    def completions(self) -> int:
        return self.controls.completions

    def app(self) -> web.Application:
        return make_app(self.record, self.max_lora_rank, self.controls)

    async def start(self) -> str:
        """Serve on a free port, or on the port of an earlier `start` (after `kill`)."""
        self._runner, self.url = await serve_on_free_port(self.app(), self._port)
        self._port = int(self.url.rsplit(":", 1)[1])
        return self.url

    async def kill(self) -> None:
        """End as a crashed server does: completions in flight lose their connection at once,
        new connections are refused (until `start`)."""
        for task, request in list(self.controls.running.items()):
            if request.transport is not None:
                request.transport.abort()
            task.cancel()
        await self.stop()


def main(argv: list[str] | None = None) -> None:
    """`python -m rltap.testing.fakes.vllm`: the fake on --host:--port until interrupted."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--record", type=Path, default=None, help="serve the dev API, log it here")
    parser.add_argument("--max-lora-rank", type=int, default=None, help="serve LoRA adapters")
    parser.add_argument(
        "--delay", type=float, default=0.0, help="seconds each completion takes, one at a time"
    )
    parser.add_argument(
        "--health-file", type=Path, default=None, help="GET /health answers 503 while it exists"
    )
    args = parser.parse_args(argv)
    with contextlib.suppress(ImportError):  # uvloop's faster loop, where it is installed
        import uvloop

        uvloop.install()
    controls = FakeControls(delay=args.delay, health_file=args.health_file)
    app = make_app(args.record, args.max_lora_rank, controls)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
