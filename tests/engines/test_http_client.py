"""The engine HTTP client against a raw asyncio server on 127.0.0.1 that answers byte for byte as
each test scripts it, under both the standard event loop and uvloop (the proxy runs on uvloop).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from rltap.engines._http_client import EngineHTTPClient, iter_sse_data
from rltap.record.errors import EngineError, EngineTimeout, EngineUnavailable

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

pytestmark = pytest.mark.uvloop_too


@dataclass
class RawServer:
    """Reads one request head (and its Content-Length body) at a time and runs `answer`."""

    answer: Answer
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                await self.answer(reader, writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.disconnected.set()
            writer.close()


@contextlib.asynccontextmanager
async def raw_server(answer: Answer) -> AsyncIterator[RawServer]:
    server = RawServer(answer)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    try:
        yield server
    finally:
        listener.close()


@contextlib.asynccontextmanager
async def engine_client(url: str, **options: Any) -> AsyncIterator[EngineHTTPClient]:
    client = EngineHTTPClient(url, engine="vLLM", **options)
    try:
        yield client
    finally:
        await client.close()


def chunk(piece: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(piece), piece)


async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    while True:
        writer.write(chunk(b"data: 1\n\n"))
        await writer.drain()
        await asyncio.sleep(0.01)


def fixed(body: bytes, *extra: bytes) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body)
        writer.write(head + b"".join(extra) + b"\r\n" + body)
        await writer.drain()

    return answer


async def test_a_keep_alive_connection_serves_the_next_request() -> None:
    async with raw_server(fixed(b'{"ok": 1}')) as server:
        client = EngineHTTPClient(server.url + "/base", engine="vLLM", api_key="k")
        for _ in range(3):
            assert await client.post_json("/v1/x", {}) == {"ok": 1}
        await client.close()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /base/v1/x HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in first
    assert b"\r\nContent-Type: application/json\r\n" in first
    assert b"\r\nContent-Length: 2\r\n" in first
    assert first.endswith(b"\r\n\r\n{}")


async def test_a_chunked_stream_hands_over_each_event_as_it_arrives() -> None:
    first_read = asyncio.Event()

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"):
            writer.write(chunk(piece))
            await writer.drain()
            await first_read.wait()  # the next event only once the client has this one
        writer.write(b"0\r\n\r\n")

    async with raw_server(chunked) as server, engine_client(server.url) as client:
        payloads = []
        async with client.post("/v1/completions", {"stream": True}) as response:
            async for payload in iter_sse_data(response):
                payloads.append(payload)
                first_read.set()
        assert payloads == [b"1", b"2"]


async def test_a_close_delimited_body_arrives_whole_and_its_connection_is_not_reused() -> None:
    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"the whole": "body"}')
        await writer.drain()
        writer.close()

    async with raw_server(until_close) as server, engine_client(server.url) as client:
        for _ in range(2):
            assert await client.get_json("/") == {"the whole": "body"}
    assert server.connections == 2


async def test_an_idle_connection_the_server_closed_is_replaced_without_an_error() -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await fixed(b"{}")(reader, writer)
        writer.close()  # keep-alive was not refused, but the server drops it anyway

    async with raw_server(once) as server, engine_client(server.url) as client:
        assert await client.post_json("/", {}) == {}
        await server.disconnected.wait()
        await asyncio.sleep(0.2)  # idle: the server's close reaches the client
        assert await client.post_json("/", {}) == {}
    assert server.connections == 2


async def test_an_unreachable_server_is_a_retryable_engine_unavailable() -> None:
    async with raw_server(fixed(b"")) as server:
        url = server.url
    async with engine_client(url) as client:
        with pytest.raises(EngineUnavailable, match="unreachable") as info:
            await client.post_json("/", {})
        assert info.value.is_retryable


async def test_a_silent_server_times_out_and_loses_the_connection() -> None:
    async def head_then_silence(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()
        await reader.read()  # until the client hangs up

    async with (
        raw_server(head_then_silence) as server,
        engine_client(server.url, timeout=0.2) as client,
    ):
        with pytest.raises(EngineTimeout) as info:
            await client.post_json("/", {})
        assert info.value.is_retryable
        await asyncio.wait_for(server.disconnected.wait(), 5)


async def test_a_server_silent_before_its_head_times_out() -> None:
    async def silence(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async with raw_server(silence) as server, engine_client(server.url, timeout=0.2) as client:
        with pytest.raises(EngineTimeout, match="sent nothing within the timeout"):
            await client.post_json("/", {})


async def test_leaving_a_stream_early_hangs_up_on_the_server() -> None:
    async with raw_server(endless) as server, engine_client(server.url) as client:
        async with client.post("/", {}) as response:
            async for _ in iter_sse_data(response):
                break
        await asyncio.wait_for(server.disconnected.wait(), 5)


async def test_a_stream_closed_while_read_fails_as_a_dropped_connection() -> None:
    """What `abort` does to a stream in flight: the read in progress fails, mapped."""

    async def close_while_reading(client: EngineHTTPClient) -> None:
        async with client.post("/", {}) as response:
            async for _ in iter_sse_data(response):
                response.close()

    async with raw_server(endless) as server, engine_client(server.url) as client:
        with pytest.raises(EngineError, match="dropped the connection") as info:
            await close_while_reading(client)
        assert info.value.is_retryable
        await asyncio.wait_for(server.disconnected.wait(), 5)


async def test_cancelling_a_call_before_its_reply_hangs_up_on_the_server() -> None:
    """What `abort` does to a non-streamed vLLM call: the task awaiting it is cancelled."""

    asked = asyncio.Event()

    async def silence(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.set()
        await reader.read()

    async with raw_server(silence) as server, engine_client(server.url) as client:
        call = asyncio.create_task(client.post_json("/", {}))
        await asyncio.wait_for(asked.wait(), 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(server.disconnected.wait(), 5)


async def test_a_connection_dropped_mid_body_is_a_retryable_engine_error() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial"')
        await writer.drain()
        writer.close()

    async with raw_server(half) as server, engine_client(server.url) as client:
        with pytest.raises(EngineError, match="dropped the connection") as info:
            await client.post_json("/", {})
        assert info.value.is_retryable


async def test_bytes_that_are_not_http_are_a_non_retryable_engine_error() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()

    async with raw_server(garbage) as server, engine_client(server.url) as client:
        with pytest.raises(EngineError, match="invalid HTTP") as info:
            await client.get_json("/")
        assert not info.value.is_retryable


async def test_max_connections_queues_requests_beyond_the_limit() -> None:
    in_flight = 0
    most = 0

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        await fixed(b"{}")(reader, writer)

    async with (
        raw_server(slow) as server,
        engine_client(server.url, max_connections=2) as client,
    ):
        replies = await asyncio.gather(*(client.post_json("/", {}) for _ in range(6)))
        assert replies == [{}] * 6
    assert most == 2
    assert server.connections == 2


async def test_a_body_larger_than_the_buffers_arrives_whole_to_a_slow_reader() -> None:
    body = bytes(range(256)) * (6 * 4096)  # 6 MiB

    async with raw_server(fixed(body)) as server, engine_client(server.url) as client:
        for _ in range(2):  # the connection stays reusable
            async with client.post("/", {}) as response:
                await asyncio.sleep(0.3)  # let the body pile up unread
                received = bytearray()
                async for piece in response.content.iter_any():
                    received += piece
                assert bytes(received) == body
    assert server.connections == 1


def test_only_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError, match="not an http"):
        EngineHTTPClient("ftp://127.0.0.1:1", engine="vLLM")
