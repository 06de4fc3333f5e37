"""What one proxy hop adds: the same engine called directly and through `rltap serve`.

(a) vllm backend in front of an instant vLLM-compatible server (`rltap.testing.fakes.vllm`
    answers at once with fixed tokens), so only the proxy's own cost is measured. Target: median
    added latency <= 1 ms on a 2-core machine.
(b) the embedded transformers engine with the tiny model (direct: the engine in this process).

For each: sequential calls (direct and proxied calls interleaved, so drift hits both alike, each
call a different conversation) give the median and p99 latency and their difference; 32
concurrent sessions x 8 turns (one growing conversation each; in process for the embedded direct
path, the same prompts) give calls/s.

`--baseline DIR` (repeatable) serves (a) again from another checkout's source (`DIR/core/src`,
e.g. a git worktree of an earlier commit, run with this venv's packages), its calls interleaved
with the others, so the proxies' hops are compared in one run on the same machine state.

Run: .venv/bin/python bench/proxy_overhead.py [--calls 400] [--skip-embedded] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from rltap.chat.renderer import ChatRenderer
from rltap.record.types import ModelRequest
from rltap.testing.models import cached_qwen_tokenizer_dir, cached_tiny_model_dir

ADMIN_KEY = "bench-admin-key-0123456789abcdef"
# The instant vLLM-compatible server, a process of its own (the other benches start it too).
FAKE_VLLM = [sys.executable, "-m", "rltap.testing.fakes.vllm"]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
QUESTION = "What is the capital of France? Answer in one word."
Call = Callable[[], Awaitable[Any]]


def question(number: int) -> list[dict[str, Any]]:
    """A different conversation per call, so no call repeats another's work."""
    return [SYSTEM, {"role": "user", "content": f"Question {number}: {QUESTION}"}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def background(command: list[str], source: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`command` running until the block ends; `source`: import rltap from that `src` folder."""
    env = None if source is None else {**os.environ, "PYTHONPATH": str(source)}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_ready(
    http: httpx.AsyncClient, url: str, process: subprocess.Popen[bytes], within: float = 120.0
) -> None:
    """Until `url` answers 200; RuntimeError when `process` exits first or `within` s pass."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"{url}: the server exited: {err[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if (await http.get(url)).status_code == 200:
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def serve_command(port: int, *engine_args: str) -> list[str]:
    return [
        sys.executable, "-m", "rltap.cli", "serve", "--port", str(port),
        "--admin-key", ADMIN_KEY, "--model-name", "bench", *engine_args,
    ]  # fmt: skip


@dataclass
class Proxy:
    url: str
    http: httpx.AsyncClient

    async def session_key(self) -> str:
        headers = {"authorization": f"Bearer {ADMIN_KEY}"}
        response = await self.http.post(f"{self.url}/rl/start_session", json={}, headers=headers)
        response.raise_for_status()
        return str(response.json()["api_key"])

    async def chat(self, key: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        response = await self.http.post(
            f"{self.url}/v1/chat/completions",
            json={"model": "bench", "messages": messages, "max_tokens": 8, **extra},
            headers={"authorization": f"Bearer {key}"},
        )
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result


async def timed(call: Call) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def sequential(
    calls: dict[str, Call], count: int, progress: Progress, label: str
) -> dict[str, float]:
    """`count` rounds of every call in turn; each name's median (`<name>_med`) and p99."""
    for _ in range(10):  # warm every path (connections, caches)
        for call in calls.values():
            await call()
    task = progress.add_task(f"{label}: sequential", total=count)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(count):
        for name, call in calls.items():
            times[name].append(await timed(call))
        progress.advance(task)
    result: dict[str, float] = {}
    for name, samples in times.items():
        result[f"{name}_med"], result[f"{name}_p99"] = quantiles(samples)
    return result


async def throughput(worker: Callable[[int], Awaitable[int]], workers: int) -> float:
    started = time.perf_counter()
    done = await asyncio.gather(*(worker(w) for w in range(workers)))
    return sum(done) / (time.perf_counter() - started)


async def proxy_session(proxy: Proxy, turns: int) -> int:
    """One session of `turns` growing turns; the calls it made."""
    key = await proxy.session_key()
    messages: list[dict[str, Any]] = [SYSTEM]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Turn {turn}. {QUESTION}"})
        body = await proxy.chat(key, messages, temperature=1.0)
        messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
    return turns


async def bench_vllm(args: argparse.Namespace, progress: Progress) -> dict[str, float]:
    tokenizer_dir = cached_qwen_tokenizer_dir()
    renderer = ChatRenderer.from_pretrained(tokenizer_dir)
    prompts = [renderer.render(question(i)).input_ids for i in range(args.calls)]
    fake_port = free_port()
    fake = [*FAKE_VLLM, "--port", str(fake_port)]
    fake_url = f"http://127.0.0.1:{fake_port}"
    engine_args = ("--engine", "vllm", "--url", fake_url, "--tokenizer", str(tokenizer_dir))
    sources: dict[str, Path | None] = {"proxy": None}
    for folder in args.baseline:
        sources[folder.name] = folder.resolve() / "core" / "src"
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    with contextlib.ExitStack() as stack:
        fake_process = stack.enter_context(background(fake))
        servers = {}
        for name, source in sources.items():
            port = free_port()
            servers[name] = (
                port,
                stack.enter_context(background(serve_command(port, *engine_args), source)),
            )
        async with httpx.AsyncClient(timeout=60, limits=limits) as http:
            await wait_ready(http, f"{fake_url}/health", fake_process)
            proxies: dict[str, Proxy] = {}
            for name, (port, process) in servers.items():
                proxies[name] = Proxy(f"http://127.0.0.1:{port}", http)
                await wait_ready(http, f"{proxies[name].url}/health", process)
            direct_calls = itertools.count()

            async def direct() -> Any:
                body = {
                    "model": "fake",
                    "prompt": prompts[next(direct_calls) % len(prompts)],
                    "max_tokens": 8,
                    "logprobs": 0,
                    "return_token_ids": True,
                }
                return (await http.post(f"{fake_url}/v1/completions", json=body)).raise_for_status()

            calls: dict[str, Call] = {"direct": direct}
            for name, proxy in proxies.items():
                calls[name] = _questions(proxy, await proxy.session_key(), len(prompts))
            result = await sequential(calls, args.calls, progress, "vllm")

            async def direct_worker(_: int) -> int:
                for _ in range(args.turns):
                    await direct()
                return args.turns

            result["direct_cps"] = await throughput(direct_worker, args.sessions)
            for name, proxy in proxies.items():
                result[f"{name}_cps"] = await throughput(
                    lambda _, proxy=proxy: proxy_session(proxy, args.turns), args.sessions
                )
    return result


def _questions(proxy: Proxy, key: str, count: int, **extra: Any) -> Call:
    """A call asking `proxy` the next of `count` different questions."""
    numbers = itertools.count()

    async def ask() -> Any:
        return await proxy.chat(key, question(next(numbers) % count), **extra)

    return ask


async def bench_embedded(args: argparse.Namespace, progress: Progress) -> dict[str, float]:
    from rltap.engines.transformers import TransformersEngine

    model_dir = cached_tiny_model_dir()
    renderer = ChatRenderer.from_pretrained(model_dir)
    calls = max(20, args.calls // 10)
    prompts = [renderer.render(question(i)).input_ids for i in range(calls)]
    engine = TransformersEngine(str(model_dir))
    await engine.start()
    port = free_port()
    command = serve_command(port, "--engine", "transformers", "--model", str(model_dir))
    with background(command) as process:
        async with httpx.AsyncClient(timeout=120) as http:
            proxy = Proxy(f"http://127.0.0.1:{port}", http)
            await wait_ready(http, f"{proxy.url}/health", process)
            key = await proxy.session_key()

            direct_calls = itertools.count()

            async def direct() -> Any:
                request = ModelRequest(
                    input_ids=prompts[next(direct_calls) % calls], max_new_tokens=8,
                    temperature=0.0, stop_token_ids=list(renderer.stop_token_ids),
                )  # fmt: skip
                return await engine.generate(request)

            proxied = _questions(proxy, key, calls, temperature=0.0)
            result = await sequential(
                {"direct": direct, "proxy": proxied}, calls, progress, "embedded"
            )

            async def direct_session(_: int) -> int:
                """What `proxy_session` does through the proxy, in process: same prompts."""
                messages: list[dict[str, Any]] = [SYSTEM]
                for turn in range(args.turns):
                    messages.append({"role": "user", "content": f"Turn {turn}. {QUESTION}"})
                    request = ModelRequest(
                        input_ids=renderer.render(messages).input_ids, max_new_tokens=8,
                        temperature=1.0, stop_token_ids=list(renderer.stop_token_ids),
                    )  # fmt: skip
                    response = await engine.generate(request)
                    reply = renderer.output_text(response.output_tokens)
                    messages.append({"role": "assistant", "content": reply})
                return args.turns

            result["direct_cps"] = await throughput(direct_session, args.sessions)
            result["proxy_cps"] = await throughput(
                lambda _: proxy_session(proxy, args.turns), args.sessions
            )
    await engine.close()
    return result


def report(
    console: Console, results: dict[str, dict[str, float]], args: argparse.Namespace
) -> None:
    table = Table(title="one proxy hop: direct vs through rltap serve (8 output tokens)")
    for column in (
        "backend",
        "direct median",
        "proxy median",
        "added median",
        "direct p99",
        "proxy p99",
        "added p99",
        f"calls/s direct ({args.sessions}x{args.turns})",
        "calls/s proxy",
    ):
        table.add_column(column, justify="right")
    for backend, r in results.items():
        proxies = [k.removesuffix("_med") for k in r if k.endswith("_med") and k != "direct_med"]
        for name in proxies:
            label = backend if name == "proxy" else f"{backend}, {name}"
            table.add_row(
                label,
                f"{r['direct_med'] * 1e3:.2f} ms", f"{r[f'{name}_med'] * 1e3:.2f} ms",
                f"{(r[f'{name}_med'] - r['direct_med']) * 1e3:.2f} ms",
                f"{r['direct_p99'] * 1e3:.2f} ms", f"{r[f'{name}_p99'] * 1e3:.2f} ms",
                f"{(r[f'{name}_p99'] - r['direct_p99']) * 1e3:.2f} ms",
                f"{r['direct_cps']:.0f}", f"{r[f'{name}_cps']:.0f}",
            )  # fmt: skip
    console.print(table)


async def run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with Progress(transient=True) as progress:
        if not args.skip_vllm:
            results["vllm (instant fake)"] = await bench_vllm(args, progress)
        if not args.skip_embedded:
            results["embedded (tiny model)"] = await bench_embedded(args, progress)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="sequential calls per path")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--skip-embedded", action="store_true")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--check", action="store_true", help="exit 1 if (a) adds over 1 ms")
    parser.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        help="a checkout whose proxy (a) also measures (repeatable)",
    )
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    results = asyncio.run(run(args))
    console = Console(width=160)
    report(console, results, args)
    vllm = results.get("vllm (instant fake)")
    if vllm is None:
        return 0
    added = (vllm["proxy_med"] - vllm["direct_med"]) * 1e3
    console.print(f"(a) median added latency: {added:.2f} ms (target <= 1 ms)")
    for folder in args.baseline:
        baseline = (vllm[f"{folder.name}_med"] - vllm["direct_med"]) * 1e3
        console.print(
            f"    baseline {folder}: {baseline:.2f} ms; this tree's / its: {added / baseline:.2f}"
        )
    return 1 if args.check and added > 1.0 else 0


if __name__ == "__main__":
    sys.exit(main())
