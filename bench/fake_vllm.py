"""An instant vLLM-compatible server: `/v1/completions` answers at once with fixed tokens.

It follows the fields rltap's vLLM engine reads (token-id prompt in, `prompt_token_ids`,
`token_ids`, `logprobs.token_logprobs`, `finish_reason`; SSE when `stream`), so a benchmark through
the proxy measures only the proxy's own cost.

With `--record FILE` it also answers the development API a server started with
`VLLM_SERVER_DEV_MODE=1` has, which rltap's weight sync drives (`/is_paused`, `/pause`,
`/collective_rpc`, `/reset_prefix_cache`, `/update_weight_version`, `/resume`; nothing is
reloaded), and appends each such request to FILE as a JSON line {"method", "path", "query",
"body"}, with "files" (the weight folder's file names) for `/collective_rpc`.

Run: .venv/bin/python bench/fake_vllm.py --port 8100 [--record FILE]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
from aiohttp import web

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


async def completions(request: web.Request) -> web.StreamResponse:
    body = orjson.loads(await request.read())
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
        line: dict[str, object] = {
            "method": request.method, "path": request.path, "query": dict(request.query),
            "body": body,
        }  # fmt: skip
        _log(record, line)
        return web.Response(body=orjson.dumps(DEV_REPLIES[request.path]),
                            content_type="application/json")  # fmt: skip

    return handle


def _log(record: Path, line: dict[str, object]) -> None:
    body = line["body"]
    if line["path"] == "/collective_rpc" and isinstance(body, dict):
        folder = Path(body["kwargs"]["weights_path"])
        line["files"] = sorted(p.name for p in folder.iterdir())
    with record.open("ab") as handle:
        handle.write(orjson.dumps(line) + b"\n")


def make_app(record: Path | None = None) -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    if record is not None:
        for path in DEV_REPLIES:
            app.router.add_route("GET" if path == "/is_paused" else "POST", path, dev_api(record))
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--record", type=Path, default=None, help="serve the dev API, log it here")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(make_app(args.record), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
