"""The proxy keeps an idle connection open longer than its clients keep one for reuse.

httpx (the OpenAI SDK's HTTP library, and the workflows') reuses a connection idle for up to 5 s;
a server closing idle connections after those same 5 s races the client's next request on it.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from rltap.testing.proxy import RunningProxy

HTTPX_KEEPALIVE_EXPIRY = 5.0
REQUEST = b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"


async def _ask_health(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(REQUEST)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await asyncio.wait_for(reader.readexactly(length), 10)
    return head


async def test_a_connection_idle_past_the_clients_reuse_window_still_answers(
    proxy: RunningProxy,
) -> None:
    url = urlsplit(proxy.url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        assert (await _ask_health(reader, writer)).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(HTTPX_KEEPALIVE_EXPIRY + 1.0)
        assert not reader.at_eof()
        assert (await _ask_health(reader, writer)).startswith(b"HTTP/1.1 200")
    finally:
        writer.close()
