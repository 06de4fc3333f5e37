"""The engine HTTP client against a raw asyncio server on 127.0.0.1 that answers byte for byte as
each test scripts it, under both the standard event loop and uvloop (the proxy runs on uvloop).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from rltap.engines._http import map_http_errors
from rltap.engines.http1 import (
    ConnectFailed,
    ConnectionDropped,
    HTTP1Client,
    ProtocolError,
    ReadTimeout,
)
from rltap.errors import EngineError, EngineTimeout, EngineUnavailable

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


def fixed(body: bytes, *extra: bytes) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body)
        writer.write(head + b"".join(extra) + b"\r\n" + body)
        await writer.drain()

    return answer


async def test_a_keep_alive_connection_serves_the_next_request() -> None:
    async with raw_server(fixed(b'{"ok": 1}')) as server:
        client = HTTP1Client(server.url + "/base", headers={"Authorization": "Bearer k"})
        for _ in range(3):
            response = await client.request("POST", "/v1/x", b"{}")
            assert (response.status, await response.read()) == (200, b'{"ok": 1}')
        await client.close()
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /base/v1/x HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in first
    assert b"\r\nContent-Length: 2\r\n" in first
    assert first.endswith(b"\r\n\r\n{}")


async def test_chunked_and_close_delimited_bodies_arrive_whole() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"data: 1\n\n", b"data: [DONE]\n\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")

    async with raw_server(chunked) as server:
        client = HTTP1Client(server.url)
        response = await client.request("GET", "/")
        pieces = [piece async for piece in response.iter_chunks()]
        assert b"".join(pieces) == b"data: 1\n\ndata: [DONE]\n\n"
        assert len(pieces) == 2  # each chunk is handed over as it arrives
        await client.close()

    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nthe whole body")
        await writer.drain()
        writer.close()

    async with raw_server(until_close) as server:
        client = HTTP1Client(server.url)
        for _ in range(2):  # the closed connection is not reused
            response = await client.request("GET", "/")
            assert await response.read() == b"the whole body"
        await client.close()
    assert server.connections == 2


async def test_an_idle_connection_the_server_closed_is_replaced_without_an_error() -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await fixed(b"{}")(reader, writer)
        writer.close()  # keep-alive was not refused, but the server drops it anyway

    async with raw_server(once) as server:
        client = HTTP1Client(server.url)
        assert await (await client.request("POST", "/", b"{}")).read() == b"{}"
        await server.disconnected.wait()
        assert await (await client.request("POST", "/", b"{}")).read() == b"{}"
        await client.close()
    assert server.connections == 2


async def test_an_unreachable_server_is_a_connect_failure_and_engine_unavailable() -> None:
    async with raw_server(fixed(b"")) as server:
        url = server.url
    client = HTTP1Client(url)
    with pytest.raises(ConnectFailed):
        await client.request("GET", "/")
    with pytest.raises(EngineUnavailable), map_http_errors("vLLM", url):
        await client.request("GET", "/")


async def test_a_silent_server_times_out_and_loses_the_connection() -> None:
    async def head_then_silence(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()
        await reader.read()  # until the client hangs up

    async with raw_server(head_then_silence) as server:
        client = HTTP1Client(server.url, timeout=0.2)
        response = await client.request("GET", "/")
        with pytest.raises(ReadTimeout):
            await response.read()
        await asyncio.wait_for(server.disconnected.wait(), 5)
        with pytest.raises(EngineTimeout), map_http_errors("vLLM", server.url):
            await (await client.request("GET", "/")).read()
        await client.close()


async def test_closing_a_response_early_hangs_up_on_the_server() -> None:
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            writer.write(b"5\r\ntoken\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)

    async with raw_server(endless) as server:
        client = HTTP1Client(server.url)
        response = await client.request("POST", "/", b"{}")
        async for _ in response.iter_chunks():
            break
        response.close()
        await asyncio.wait_for(server.disconnected.wait(), 5)
        with pytest.raises(ConnectionDropped):
            await response.read()
        await client.close()


async def test_a_connection_dropped_mid_body_is_a_retryable_engine_error() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial"')
        await writer.drain()
        writer.close()

    async with raw_server(half) as server:
        client = HTTP1Client(server.url)
        response = await client.request("POST", "/", b"{}")
        with pytest.raises(EngineError) as info, map_http_errors("vLLM", server.url):
            await response.read()
        assert info.value.is_retryable
        await client.close()


async def test_bytes_that_are_not_http_are_a_protocol_error() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()

    async with raw_server(garbage) as server:
        client = HTTP1Client(server.url)
        with pytest.raises(ProtocolError):
            await client.request("GET", "/")
        with pytest.raises(EngineError) as info, map_http_errors("vLLM", server.url):
            await client.request("GET", "/")
        assert not info.value.is_retryable
        await client.close()


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

    async with raw_server(slow) as server:
        client = HTTP1Client(server.url, max_connections=2)

        async def call() -> bytes:
            return await (await client.request("POST", "/", b"{}")).read()

        assert await asyncio.gather(*(call() for _ in range(6))) == [b"{}"] * 6
        await client.close()
    assert most == 2
    assert server.connections == 2


async def test_a_body_larger_than_the_buffer_limit_arrives_whole_to_a_slow_reader() -> None:
    body = bytes(range(256)) * (6 * 4096)  # 6 MiB, over the 4 MiB read-pause mark

    async with raw_server(fixed(body)) as server:
        client = HTTP1Client(server.url)
        response = await client.request("GET", "/")
        await asyncio.sleep(0.3)  # let the body pile up unread
        received = bytearray()
        async for piece in response.iter_chunks():
            received += piece
        assert bytes(received) == body
        assert await (await client.request("GET", "/")).read() == body  # still reusable
        await client.close()
    assert server.connections == 1


def test_only_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError, match="not an http"):
        HTTP1Client("ftp://127.0.0.1:1")
