"""Load and soak one proxy process: concurrent sessions, then many sequential lifecycles.

The proxy is rltap's app in front of an instant engine (`rltap.testing.fakes.InstantEngine`: fixed
reply, no model), served by uvicorn in its own process (`serve`), so the figures are the proxy's
own: its calls/s and its resident memory (VmRSS and VmHWM from /proc), read between phases.

    serve  the proxy on 127.0.0.1 (admin key from RLTAP_ADMIN_KEY); prints `port N`, then serves
    load   SESSIONS concurrent sessions x TURNS turns (APIs in rotation, some streamed), after
           --warmup sessions: no error, every interaction exported exactly once, memory after
           all exports within --max-growth of where it was after the warm-up
    soak   SESSIONS sequential lifecycles (grant, start, turns, reward, end, export); memory every
           --every sessions; the growth over the second half must stay under --max-growth-mb

Run: .venv/bin/python bench/soak.py load --sessions 500 --turns 4
     .venv/bin/python bench/soak.py soak --sessions 10000
Both exit 1 when a check fails; --json PATH writes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ADMIN_KEY_ENV = "RLTAP_ADMIN_KEY"
APIS = ("chat", "responses", "messages")
MODEL = "instant"
REPLY = "Hello from the instant engine."
MAX_TOKENS = 16


# --- the proxy process -------------------------------------------------------------------------


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from rltap.chat.renderer import ChatRenderer
    from rltap.config.serve import ChatConfig, LimitsConfig, ServeConfig
    from rltap.proxy.app import create_app
    from rltap.testing.fakes import InstantEngine
    from rltap.testing.models import cached_qwen_tokenizer_dir

    admin_key = os.environ.get(ADMIN_KEY_ENV)
    if not admin_key:
        print(f"set {ADMIN_KEY_ENV}", file=sys.stderr)
        return 2
    renderer = ChatRenderer.from_pretrained(cached_qwen_tokenizer_dir(), mode="concat")
    reply_ids = renderer.tokenizer.encode(REPLY, add_special_tokens=False)
    engine = InstantEngine(reply_ids, renderer.end_of_turn_ids[-1])
    limits = LimitsConfig(
        capacity=args.capacity,
        session_ttl=args.session_ttl,
        export_grace=args.export_grace,
        reap_interval=args.reap_interval,
        model_name=MODEL,
        max_body_bytes=args.max_body_bytes,
    )
    chat = ChatConfig(max_context=args.max_context, default_max_tokens=64)
    app = create_app(engine, renderer, ServeConfig(chat=chat, limits=limits), admin_key=admin_key)
    _exit_with_parent()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    print(f"port {sock.getsockname()[1]}", flush=True)
    # What `rltap serve` runs: uvicorn's defaults (uvloop, httptools), warnings only, no access log.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[sock])
    return 0


def _exit_with_parent() -> None:
    """End this process when the one that started it is gone (killed on a timeout, say)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def serve_command(*options: str) -> list[str]:
    """The command line of a proxy process (`serve`); the admin key goes in its environment."""
    return [sys.executable, str(Path(__file__).resolve()), "serve", *options]


@dataclass
class ProxyProcess:
    process: subprocess.Popen[str]
    url: str

    @property
    def pid(self) -> int:
        return self.process.pid


@contextlib.contextmanager
def proxy_process(admin_key: str, *options: str, within: float = 300.0) -> Iterator[ProxyProcess]:
    """A proxy process on a free port; stopped (SIGTERM, then SIGKILL) on exit."""
    env = {**os.environ, ADMIN_KEY_ENV: admin_key}
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            serve_command(*options), stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
        )
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], within)
            line = process.stdout.readline() if ready else ""
            if not line.startswith("port "):
                stderr.seek(0)
                msg = f"the proxy did not start: {line!r} {stderr.read()[-2000:]}"
                raise RuntimeError(msg)
            yield ProxyProcess(process, f"http://127.0.0.1:{int(line.split()[1])}")
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def wait_healthy(http: aiohttp.ClientSession, url: str, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(aiohttp.ClientConnectionError):
            async with http.get(f"{url}/health") as response:
                if response.status == 200:
                    return
        if time.monotonic() > deadline:
            msg = f"{url} did not answer /health within {within:g}s"
            raise RuntimeError(msg)
        await asyncio.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> dict[str, float]:
    """Resident memory of `pid` now (rss) and at its peak (hwm), in MiB, from /proc."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values["rss" if name == "VmRSS" else "hwm"] = int(rest.split()[0]) / 1024
    return values


# --- one session, as an agent and its trainer drive it -----------------------------------------


class ProxyCallError(Exception):
    """A request answered with an unexpected status."""


@dataclass
class Driver:
    """Sends a session's requests (aiohttp: the client's own cost stays well below the proxy's)."""

    http: aiohttp.ClientSession
    url: str
    admin_key: str
    requests: int = 0
    calls: int = 0

    async def post(self, path: str, key: str, body: Any = None, expect: int = 200) -> Any:
        self.requests += 1
        headers = {"authorization": f"Bearer {key}"}
        data = b"" if body is None else json.dumps(body).encode()
        async with self.http.post(f"{self.url}{path}", data=data, headers=headers) as response:
            raw = await response.read()
        if response.status != expect:
            msg = f"{path}: {response.status} {raw[:300]!r}"
            raise ProxyCallError(msg)
        return json.loads(raw)

    async def generate(
        self, api: str, key: str, history: list[dict[str, Any]], stream: bool
    ) -> tuple[str, str]:
        """One turn through `api`: its interaction id and the reply text."""
        self.calls += 1
        if stream:
            return await self._stream_chat(key, history)
        if api == "chat":
            body = {"model": MODEL, "messages": history, "max_tokens": MAX_TOKENS}
            reply = await self.post("/v1/chat/completions", key, body)
            return reply["id"], reply["choices"][0]["message"]["content"]
        if api == "responses":
            body = {"model": MODEL, "input": history, "max_output_tokens": MAX_TOKENS}
            reply = await self.post("/v1/responses", key, body)
            (message,) = [item for item in reply["output"] if item["type"] == "message"]
            return reply["id"], message["content"][0]["text"]
        system = [m["content"] for m in history if m["role"] == "system"]
        turns = [m for m in history if m["role"] != "system"]
        body = {"model": MODEL, "system": system[0], "messages": turns, "max_tokens": MAX_TOKENS}
        reply = await self.post("/v1/messages", key, body)
        return reply["id"], reply["content"][0]["text"]

    async def _stream_chat(self, key: str, history: list[dict[str, Any]]) -> tuple[str, str]:
        self.requests += 1
        body = {"model": MODEL, "messages": history, "max_tokens": MAX_TOKENS, "stream": True}
        headers = {"authorization": f"Bearer {key}"}
        ids: set[str] = set()
        text: list[str] = []
        done = False
        url = f"{self.url}/v1/chat/completions"
        async with self.http.post(url, data=json.dumps(body), headers=headers) as response:
            if response.status != 200:
                msg = f"stream: {response.status} {(await response.read())[:300]!r}"
                raise ProxyCallError(msg)
            async for raw in response.content:
                line = raw.decode().rstrip("\r\n")
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    msg = f"stream error event: {chunk['error']}"
                    raise ProxyCallError(msg)
                ids.add(chunk["id"])
                text.extend(c["delta"].get("content") or "" for c in chunk["choices"])
        if not done or len(ids) != 1:
            msg = f"stream ended without [DONE] or with ids {sorted(ids)}"
            raise ProxyCallError(msg)
        return ids.pop(), "".join(text)


def check_export(export: dict[str, Any], ids: list[str], discount: float) -> None:
    """The export holds exactly the session's replies, as one chain, rewards discounted."""
    exported = [item["interaction_id"] for item in export["interactions"]]
    if exported != ids:
        msg = f"exported {exported}, replied {ids}"
        raise ProxyCallError(msg)
    parents = [item["parent_id"] for item in export["interactions"]]
    if parents != [None, *ids[:-1]]:
        msg = f"parents {parents} do not chain {ids}"
        raise ProxyCallError(msg)
    rewards = [item["reward"] for item in export["interactions"]]
    wanted = [discount ** (len(ids) - 1 - k) for k in range(len(ids))]
    if any(abs(a - b) > 1e-6 for a, b in zip(rewards, wanted, strict=True)):
        msg = f"rewards {rewards}, expected {wanted}"
        raise ProxyCallError(msg)
    if export["not_exported"] or export["state"] != "ended":
        msg = f"state {export['state']}, not exported {export['not_exported']}"
        raise ProxyCallError(msg)


async def lifecycle(driver: Driver, index: int, turns: int, discount: float = 0.9) -> list[str]:
    """Grant, start, `turns` turns, reward, end, export, export again (404): the replied ids."""
    admin = driver.admin_key
    api = APIS[index % len(APIS)]
    stream = api == "chat" and index % 2 == 0
    await driver.post("/grant_capacity", admin)
    started = await driver.post("/rl/start_session", admin, {"task_id": f"task-{index}"})
    session_id, key = started["session_id"], started["api_key"]
    history: list[dict[str, Any]] = [{"role": "system", "content": "You answer briefly."}]
    ids: list[str] = []
    for turn in range(turns):
        history.append({"role": "user", "content": f"Session {index}, turn {turn}: go on."})
        interaction_id, text = await driver.generate(api, key, history, stream)
        ids.append(interaction_id)
        history.append({"role": "assistant", "content": text})
    await driver.post("/rl/set_reward", key, {"reward": 1.0})
    await driver.post("/rl/end_session", key)
    body = {"session_id": session_id, "discount": discount}
    check_export(await driver.post("/export_trajectories", admin, body), ids, discount)
    await driver.post("/export_trajectories", admin, body, expect=404)  # exported exactly once
    return ids


@dataclass
class Round:
    seconds: float = 0.0
    calls: int = 0
    requests: int = 0
    interactions: int = 0
    errors: list[str] = field(default_factory=list)


async def run_round(driver: Driver, sessions: int, turns: int, offset: int) -> Round:
    """`sessions` concurrent lifecycles; errors are collected, not raised."""
    calls, requests = driver.calls, driver.requests
    started = time.perf_counter()
    results = await asyncio.gather(
        *(lifecycle(driver, offset + i, turns) for i in range(sessions)), return_exceptions=True
    )
    result = Round(seconds=time.perf_counter() - started)
    result.calls, result.requests = driver.calls - calls, driver.requests - requests
    ids: list[str] = []
    for outcome in results:
        if isinstance(outcome, BaseException):
            result.errors.append(f"{type(outcome).__name__}: {outcome}")
        else:
            ids.extend(outcome)
    if len(set(ids)) != len(ids):
        result.errors.append(f"{len(ids) - len(set(ids))} interaction ids were replied twice")
    result.interactions = len(ids)
    return result


async def server_state(driver: Driver) -> tuple[float, int]:
    """Open sessions and 5xx answers so far, from the proxy's /metrics."""
    async with driver.http.get(f"{driver.url}/metrics") as response:
        text = await response.text()
    open_sessions, server_errors = 0.0, 0
    for line in text.splitlines():
        if line.startswith("rltap_open_sessions "):
            open_sessions = float(line.split()[1])
        elif line.startswith("rltap_requests_total{") and 'status="5' in line:
            server_errors += int(float(line.split()[-1]))
    return open_sessions, server_errors


@contextlib.asynccontextmanager
async def driving(args: argparse.Namespace, connections: int) -> AsyncIterator[tuple[Driver, int]]:
    admin_key = secrets.token_urlsafe(24)
    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=120)
    with proxy_process(admin_key, "--capacity", str(max(1024, 2 * args.sessions))) as proxy:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            await wait_healthy(http, proxy.url)
            yield Driver(http, proxy.url, admin_key), proxy.pid


# --- load ---------------------------------------------------------------------------------------


async def load(args: argparse.Namespace) -> dict[str, Any]:
    async with driving(args, args.sessions) as (driver, pid):
        at_start = memory_mb(pid)
        warmup = await run_round(driver, args.warmup, args.turns, offset=0)
        after_warmup = memory_mb(pid)
        cpu, own_cpu = cpu_seconds(pid), time.process_time()
        measured = await run_round(driver, args.sessions, args.turns, offset=args.warmup)
        cpu, own_cpu = cpu_seconds(pid) - cpu, time.process_time() - own_cpu
        at_end = memory_mb(pid)
        open_sessions, server_errors = await server_state(driver)
    errors = warmup.errors + measured.errors
    if open_sessions:
        errors.append(f"{open_sessions:g} sessions still open after every export")
    if server_errors:
        errors.append(f"the proxy answered {server_errors} requests with a 5xx")
    growth = at_end["rss"] / after_warmup["rss"] - 1
    return {
        "sessions": args.sessions,
        "turns": args.turns,
        "calls": measured.calls,
        "requests": measured.requests,
        "interactions_exported": measured.interactions,
        "seconds": round(measured.seconds, 2),
        "calls_per_s": round(measured.calls / measured.seconds, 1),
        "requests_per_s": round(measured.requests / measured.seconds, 1),
        "proxy_cpu_ms_per_request": round(1000 * cpu / measured.requests, 3),
        "client_cpu_ms_per_request": round(1000 * own_cpu / measured.requests, 3),
        "warmup_sessions": args.warmup,
        "warmup_seconds": round(warmup.seconds, 2),
        "rss_start_mb": round(at_start["rss"], 1),
        "rss_after_warmup_mb": round(after_warmup["rss"], 1),
        "rss_peak_mb": round(at_end["hwm"], 1),
        "rss_end_mb": round(at_end["rss"], 1),
        "rss_growth": round(growth, 4),
        "errors": len(errors),
        "first_errors": errors[:5],
        "ok": not errors and growth <= args.max_growth,
    }


def print_load(report: dict[str, Any]) -> None:
    print(
        f"load: {report['sessions']} concurrent sessions x {report['turns']} turns, "
        f"{report['calls']} calls ({report['requests']} requests) in {report['seconds']} s: "
        f"{report['calls_per_s']} calls/s, {report['requests_per_s']} requests/s"
    )
    print(
        f"  CPU per request: proxy {report['proxy_cpu_ms_per_request']} ms, "
        f"client {report['client_cpu_ms_per_request']} ms"
    )
    print(
        f"  interactions exported once: {report['interactions_exported']}, "
        f"errors: {report['errors']} {report['first_errors']}"
    )
    print(
        f"  proxy RSS: start {report['rss_start_mb']} MiB, after warm-up "
        f"{report['rss_after_warmup_mb']} MiB, peak {report['rss_peak_mb']} MiB, end "
        f"{report['rss_end_mb']} MiB ({100 * report['rss_growth']:+.1f}% since warm-up)"
    )


# --- soak ---------------------------------------------------------------------------------------


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    samples: list[dict[str, float]] = []
    errors: list[str] = []
    async with driving(args, 4) as (driver, pid):
        samples.append({"sessions": 0, "rss_mb": memory_mb(pid)["rss"], "seconds": 0.0})
        print(f"{'sessions':>9} {'RSS MiB':>9} {'growth MiB':>11} {'calls/s':>8}", flush=True)
        started = time.perf_counter()
        calls = 0
        for index in range(args.sessions):
            try:
                await lifecycle(driver, index, args.turns)
            except (ProxyCallError, aiohttp.ClientError) as exc:
                errors.append(f"session {index}: {type(exc).__name__}: {exc}")
                if len(errors) >= 20:
                    break
            if (index + 1) % args.every == 0:
                now = time.perf_counter() - started
                sample = {"sessions": index + 1, "rss_mb": memory_mb(pid)["rss"], "seconds": now}
                growth = sample["rss_mb"] - samples[-1]["rss_mb"]
                rate = (driver.calls - calls) / (now - samples[-1]["seconds"])
                calls = driver.calls
                samples.append(sample)
                print(
                    f"{index + 1:>9} {sample['rss_mb']:>9.1f} {growth:>+11.2f} {rate:>8.1f}",
                    flush=True,
                )
        hwm = memory_mb(pid)["hwm"]
        open_sessions, server_errors = await server_state(driver)
    if open_sessions:
        errors.append(f"{open_sessions:g} sessions still open after every export")
    if server_errors:
        errors.append(f"the proxy answered {server_errors} requests with a 5xx")
    half = samples[len(samples) // 2]
    second_half = samples[-1]["rss_mb"] - half["rss_mb"]
    return {
        "sessions": args.sessions,
        "turns": args.turns,
        "seconds": round(samples[-1]["seconds"], 1),
        "calls_per_s": round(driver.calls / max(samples[-1]["seconds"], 1e-9), 1),
        "samples": [{k: round(v, 2) for k, v in s.items()} for s in samples],
        "rss_peak_mb": round(hwm, 1),
        "second_half_from": int(half["sessions"]),
        "second_half_growth_mb": round(second_half, 2),
        "errors": len(errors),
        "first_errors": errors[:5],
        "ok": not errors and second_half <= args.max_growth_mb,
    }


def print_soak(report: dict[str, Any]) -> None:
    print(
        f"soak: {report['sessions']} sequential sessions x {report['turns']} turns in "
        f"{report['seconds']} s ({report['calls_per_s']} calls/s); peak RSS "
        f"{report['rss_peak_mb']} MiB; growth from session {report['second_half_from']} on: "
        f"{report['second_half_growth_mb']:+.2f} MiB; errors: {report['errors']} "
        f"{report['first_errors']}"
    )


# --- command line -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("serve", help="run the proxy with the instant engine")
    server.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    server.add_argument("--capacity", type=int, default=1024)
    server.add_argument("--session-ttl", type=float, default=1800.0)
    server.add_argument("--export-grace", type=float, default=900.0)
    server.add_argument("--reap-interval", type=float, default=5.0)
    server.add_argument("--max-context", type=int, default=32768)
    server.add_argument("--max-body-bytes", type=int, default=32 * 1024 * 1024)
    loader = commands.add_parser("load", help="concurrent sessions through one proxy process")
    loader.add_argument("--sessions", type=int, default=500)
    loader.add_argument("--turns", type=int, default=4)
    loader.add_argument("--warmup", type=int, default=50, help="sessions before measuring")
    loader.add_argument("--max-growth", type=float, default=0.10, help="RSS growth allowed")
    soaker = commands.add_parser("soak", help="sequential session lifecycles")
    soaker.add_argument("--sessions", type=int, default=10_000)
    soaker.add_argument("--turns", type=int, default=2)
    soaker.add_argument("--every", type=int, default=1000, help="sample memory every N sessions")
    soaker.add_argument("--max-growth-mb", type=float, default=4.0, help="over the second half")
    for sub in (loader, soaker):
        sub.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser


def main() -> int:
    args = build_parser().parse_args()
    if args.command == "serve":
        return serve(args)
    report = asyncio.run(load(args) if args.command == "load" else soak(args))
    (print_load if args.command == "load" else print_soak)(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    if not report["ok"]:
        print("FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
