"""One proxy over several engines (`rltap serve --url A,B,...`): what the router buys and costs.

Every engine is the instant fake vLLM server (`python -m rltap.testing.fakes.vllm`), a process
of its own; every proxy is `rltap serve`, a process of its own. All run side by side in one run.

(a) calls/s through one proxy over 2 engines (and 3) against over 1, when each engine is the
    bottleneck: the fakes take `--delay` seconds per call, one call at a time, and
    `--sessions` concurrent sessions of `--turns` growing turns keep them busy. Goal: 2 engines
    >= 1.8x one.
(b) the latency the router adds: sequential calls through a proxy over 1 instant fake and
    through one over 2 (interleaved, so drift hits both alike), median of `--calls` each.
    Goal: +0.1 ms at most.
(c) how evenly new sessions spread: the sessions each engine got in (a)'s multi-engine runs
    (`rltap_engine_sessions` on the proxy's /metrics), as the largest deviation from an even
    share. Goal: within 10%.

The machine's cores are shared by every process here (and whatever else runs): the figures
are ratios of runs made side by side, not absolute capacities.

Run: .venv/bin/python bench/engine_router.py [--quick] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import statistics
import sys
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from proxy_overhead import (  # beside this script (its folder is sys.path[0])
    FAKE_VLLM,
    QUESTION,
    SYSTEM,
    Proxy,
    background,
    free_port,
    proxy_session,
    serve_command,
    wait_ready,
)
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from rltap.testing.models import cached_qwen_tokenizer_dir

GOAL_SPEEDUP = 1.8
GOAL_ADDED_MS = 0.1
GOAL_SPREAD = 0.10


async def sessions_per_engine(proxy: Proxy) -> list[float]:
    text = (await proxy.http.get(f"{proxy.url}/metrics")).text
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "rltap_engine_sessions"
    ]


async def calls_per_second(proxy: Proxy, args: argparse.Namespace, progress: Progress) -> float:
    """`args.sessions` conversations, `args.concurrency` at a time: completed calls per second."""
    task = progress.add_task(f"(a) {proxy.url}", total=args.sessions)
    gate = asyncio.Semaphore(args.concurrency)

    async def one() -> int:
        async with gate:
            done = await proxy_session(proxy, args.turns)
        progress.advance(task)
        return done

    started = time.perf_counter()
    calls = sum(await asyncio.gather(*(one() for _ in range(args.sessions))))
    return calls / (time.perf_counter() - started)


async def added_latency(
    proxies: dict[str, Proxy], count: int, progress: Progress
) -> dict[str, float]:
    """Median seconds per sequential call through each proxy, calls interleaved."""
    keys = {name: await proxy.session_key() for name, proxy in proxies.items()}
    numbers = itertools.count()

    async def ask(name: str) -> float:
        question = [SYSTEM, {"role": "user", "content": f"Q{next(numbers)}: {QUESTION}"}]
        started = time.perf_counter()
        await proxies[name].chat(keys[name], question)
        return time.perf_counter() - started

    for _ in range(20):  # warm connections and caches
        for name in proxies:
            await ask(name)
    task = progress.add_task("(b) sequential calls", total=count)
    times: dict[str, list[float]] = {name: [] for name in proxies}
    for _ in range(count):
        for name in proxies:
            times[name].append(await ask(name))
        progress.advance(task)
    return {name: statistics.median(samples) for name, samples in times.items()}


def spread(sessions: list[float]) -> float:
    """The largest deviation of an engine's sessions from an even share, as a fraction of it."""
    even = sum(sessions) / len(sessions)
    return max(abs(count - even) for count in sessions) / even


def router_command(port: int, urls: list[str], tokenizer: str) -> list[str]:
    engine = ("--engine", "vllm", "--url", ",".join(urls), "--tokenizer", tokenizer)
    return serve_command(port, *engine, "--capacity", str(100_000))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tokenizer = str(cached_qwen_tokenizer_dir())
    counts = [1, 2] if args.quick else [1, 2, 3]
    slow = [free_port() for _ in range(max(counts))]
    instant = [free_port() for _ in range(2)]
    fakes = [(port, ["--delay", str(args.delay)]) for port in slow]
    fakes += [(port, []) for port in instant]
    url = "http://127.0.0.1:{}".format
    proxies = {f"slow{n}": [url(port) for port in slow[:n]] for n in counts}
    proxies |= {"instant1": [url(instant[0])], "instant2": [url(port) for port in instant]}
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    results: dict[str, Any] = {"counts": counts}
    with contextlib.ExitStack() as stack, Progress(transient=True) as progress:
        started = {}
        for port, extra in fakes:
            process = stack.enter_context(background([*FAKE_VLLM, "--port", str(port), *extra]))
            started[f"{url(port)}/health"] = process
        running: dict[str, Proxy] = {}
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:
            for health, process in started.items():
                await wait_ready(http, health, process, within=180)
            for name, urls in proxies.items():
                port = free_port()
                process = stack.enter_context(background(router_command(port, urls, tokenizer)))
                running[name] = Proxy(url(port), http)
                started[f"{url(port)}/health"] = process
            for health, process in started.items():
                await wait_ready(http, health, process, within=180)
            for n in counts:
                results[f"cps{n}"] = await calls_per_second(running[f"slow{n}"], args, progress)
                if n > 1:
                    results[f"sessions{n}"] = await sessions_per_engine(running[f"slow{n}"])
            pair = {name: running[name] for name in ("instant1", "instant2")}
            results |= await added_latency(pair, args.calls, progress)
    return results


def report(console: Console, results: dict[str, Any], args: argparse.Namespace) -> list[bool]:
    """Print the table; whether each goal was met."""
    title = (
        f"one proxy over several engines (fakes: {args.delay * 1e3:g} ms per call one at a "
        f"time; {args.sessions} sessions x {args.turns} turns, {args.concurrency} at once)"
    )
    table = Table(title=title)
    for column in ("measure", "figure", "goal", "met"):
        table.add_column(column, justify="right")
    met = []
    cps1 = results["cps1"]
    for n in results["counts"]:
        speedup = results[f"cps{n}"] / cps1
        goal = f">= {GOAL_SPEEDUP}x" if n == 2 else ""
        ok = speedup >= GOAL_SPEEDUP if n == 2 else None
        figure = f"{results[f'cps{n}']:.0f} calls/s ({speedup:.2f}x)"
        table.add_row(f"(a) {n} engine{'s' * (n > 1)}", figure, goal, _mark(ok))
        if ok is not None:
            met.append(ok)
    added = (results["instant2"] - results["instant1"]) * 1e3
    ok = added <= GOAL_ADDED_MS
    met.append(ok)
    figure = (
        f"{added:+.3f} ms ({results['instant1'] * 1e3:.2f} -> {results['instant2'] * 1e3:.2f} "
        f"ms median, {args.calls} calls)"
    )
    table.add_row("(b) router's added latency", figure, f"<= +{GOAL_ADDED_MS} ms", _mark(ok))
    for n in results["counts"][1:]:
        sessions = results[f"sessions{n}"]
        deviation = spread(sessions)
        ok = deviation <= GOAL_SPREAD
        met.append(ok)
        figure = f"{deviation:.1%} ({' / '.join(f'{s:.0f}' for s in sessions)} sessions)"
        table.add_row(f"(c) spread over {n}", figure, f"<= {GOAL_SPREAD:.0%}", _mark(ok))
    console.print(table)
    return met


def _mark(ok: bool | None) -> str:
    return "" if ok is None else ("yes" if ok else "NO")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per call of a fake")
    parser.add_argument("--sessions", type=int, default=120)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=24, help="sessions at once")
    parser.add_argument("--calls", type=int, default=600, help="(b): sequential calls each")
    parser.add_argument("--quick", action="store_true", help="CI-sized: 1 and 2 engines, fewer")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args(argv)
    if args.quick:
        args.sessions, args.turns, args.calls = 24, 2, 60
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    results = asyncio.run(run(args))
    met = report(Console(width=160), results, args)
    return 1 if args.check and not all(met) else 0


if __name__ == "__main__":
    sys.exit(main())
