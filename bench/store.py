"""What the capture store costs and how it scales: `rltap serve --store` beside `rltap serve`.

(a) Write cost per call: two proxies in front of the same instant vLLM-compatible server
    (`rltap.testing.fakes.vllm`), one with `--store`, one without; 4-call sessions, their calls
    interleaved (one call to each proxy in turn, so drift hits both alike). The store's cost is
    the difference of the median latencies (goal: <= 0.1 ms). Each stored reply waits until its
    row is in the pipe to the store's writer process (`rltap.store.writer`).
(b) Scale: a store filled with `--sessions` sessions of 4 calls (default 10,000) through the
    proxy's own write path (`InteractionCache` journalling to `CaptureStore`: session started,
    4 calls completed, a reward, session ended), each call 200 prompt + 32 generated tokens.
    Then the viewer's session list page (the first 200 sessions by reward, served by
    `rltap view`'s app under uvicorn; goal < 300 ms) and a Parquet export of all of it
    (`rltap export`; goal < 30 s).

Run: .venv/bin/python bench/store.py [--calls 300] [--sessions 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from proxy_overhead import (
    FAKE_VLLM,
    SYSTEM,
    Proxy,
    background,
    free_port,
    quantiles,
    serve_command,
    wait_ready,
)
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from rltap.record.types import InteractionWithTokenLogpReward, ModelResponse
from rltap.store.capture import CaptureStore
from rltap.store.files import export_store
from rltap.testing.models import cached_qwen_tokenizer_dir
from rltap.tree.cache import InteractionCache
from rltap.view import create_view_app


async def _session_calls(proxy: Proxy, turns: int) -> list[float]:
    """One session of `turns` calls, a growing conversation; each call's latency."""
    key = await proxy.session_key()
    messages: list[dict[str, Any]] = [SYSTEM]
    times = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Turn {turn} of a session."})
        started = time.perf_counter()
        body = await proxy.chat(key, messages)
        times.append(time.perf_counter() - started)
        messages.append(body["choices"][0]["message"])
    return times


async def bench_write_cost(calls: int, store: Path, progress: Progress) -> dict[str, float]:
    """(a): median per-call latency through each proxy, interleaved session by session."""
    tokenizer = str(cached_qwen_tokenizer_dir())
    fake_port = free_port()
    fake_url = f"http://127.0.0.1:{fake_port}"
    engine = ("--engine", "vllm", "--url", fake_url, "--tokenizer", tokenizer)
    ports = {"memory": free_port(), "store": free_port()}
    flags = {"memory": (), "store": ("--store", str(store))}
    times: dict[str, list[float]] = {name: [] for name in ports}
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(background([*FAKE_VLLM, "--port", str(fake_port)]))
        processes = {
            name: stack.enter_context(background(serve_command(port, *engine, *flags[name])))
            for name, port in ports.items()
        }
        async with httpx.AsyncClient(timeout=60) as http:
            await wait_ready(http, f"{fake_url}/health", fake)
            proxies = {}
            for name, port in ports.items():
                proxies[name] = Proxy(f"http://127.0.0.1:{port}", http)
                await wait_ready(http, f"{proxies[name].url}/health", processes[name])
            for proxy in proxies.values():  # warm-up
                for _ in range(5):
                    await _session_calls(proxy, 4)
            task = progress.add_task("(a) sessions through both proxies", total=calls // 4)
            for _ in range(calls // 4):
                for name, proxy in proxies.items():
                    times[name].extend(await _session_calls(proxy, 4))
                progress.advance(task)
    result: dict[str, float] = {}
    for name, samples in times.items():
        result[f"{name}_med"], result[f"{name}_p99"] = quantiles(samples)
    return result


def _call(
    number: int, parent: InteractionWithTokenLogpReward | None
) -> InteractionWithTokenLogpReward:
    prompt = list(range(1000 + number % 7, 1200 + number % 7))  # 200 prompt tokens
    response = ModelResponse(
        input_tokens=prompt, output_tokens=list(range(2000, 2032)),
        output_logprobs=[-0.5] * 32, output_versions=[0] * 32,
    )  # fmt: skip
    messages = [SYSTEM, {"role": "user", "content": f"Question {number}: what is {number} + 1?"}]
    return InteractionWithTokenLogpReward(model_response=response, messages=messages, parent=parent)


def fill_store(path: Path, sessions: int, progress: Progress) -> dict[str, float]:
    """(b) first half: `sessions` sessions of 4 calls through the proxy's journal path."""
    store = CaptureStore(path)
    task = progress.add_task(f"(b) {sessions:,} sessions of 4 calls into the store", total=sessions)
    started = time.perf_counter()
    for number in range(sessions):
        session_id = f"bench-{number:06d}"
        store.session_started(session_id, b"\0" * 32, f"row-{number % 500}")
        cache = InteractionCache(store.journal(session_id))
        parent = None
        for turn in range(4):
            node = _call(number * 4 + turn, parent)
            assert node.model_response is not None
            cache.add(node)
            cache.complete(
                node.interaction_id, node.model_response, [{"role": "assistant", "content": "x"}]
            )
            parent = node
        cache.set_last_reward((number % 11) / 10)
        store.session_ended(session_id, "ended")
        if number % 500 == 0:
            store.flush()  # keep what waits in memory short
            progress.update(task, completed=number)
    store.flush()
    elapsed = time.perf_counter() - started
    store.close()
    progress.update(task, completed=sessions)
    return {"fill_s": elapsed, "per_call_us": elapsed / (sessions * 4) * 1e6}


def session_list_ms(path: Path, repeats: int = 7) -> list[float]:
    """The viewer's session list page (first 200 by reward), over HTTP to a uvicorn server."""
    config = uvicorn.Config(create_view_app(path), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/api/runs/{path.stem}/sessions?sort=reward&desc=true&limit=200"
    times = []
    with httpx.Client(timeout=60) as http:
        for _ in range(repeats):
            started = time.perf_counter()
            reply = http.get(url)
            times.append((time.perf_counter() - started) * 1000)
            reply.raise_for_status()
        assert len(reply.json()["sessions"]) == 200
    server.should_exit = True
    thread.join(timeout=10)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="(a): calls per proxy")
    parser.add_argument("--sessions", type=int, default=10_000, help="(b): sessions of 4 calls")
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as folder, Progress(console=console) as progress:
        root = Path(folder)
        write = asyncio.run(bench_write_cost(args.calls, root / "proxy.sqlite", progress))
        filled = fill_store(root / "big.sqlite", args.sessions, progress)
        listing = session_list_ms(root / "big.sqlite")
        started = time.perf_counter()
        exported = export_store(root / "big.sqlite", root / "all.parquet")
        export_s = time.perf_counter() - started
    added = (write["store_med"] - write["memory_med"]) * 1000
    table = Table(title="capture store (bench/store.py)")
    for column in ("measure", "value", "goal"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    table.add_row("(a) median call, no store", f"{write['memory_med'] * 1000:.3f} ms", "")
    table.add_row("(a) median call, --store", f"{write['store_med'] * 1000:.3f} ms", "")
    table.add_row("(a) added by the store (median)", f"{added:+.3f} ms", "<= 0.1 ms")
    table.add_row(
        "(a) p99 no store / --store",
        f"{write['memory_p99'] * 1000:.2f} / {write['store_p99'] * 1000:.2f} ms",
        "",
    )
    table.add_row(
        f"(b) fill: {args.sessions:,} x 4 calls",
        f"{filled['fill_s']:.1f} s ({filled['per_call_us']:.0f} us a call)",
        "",
    )
    table.add_row(
        "(b) session list page (median of 7)", f"{statistics.median(listing):.0f} ms", "< 300 ms"
    )
    table.add_row(f"(b) Parquet export: {exported.rows:,} rows", f"{export_s:.1f} s", "< 30 s")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
