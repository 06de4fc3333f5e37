"""A lean HTTP/1.1 client for one engine server: keep-alive connections, fixed-length, chunked and
close-delimited bodies, streamed reads, and a timeout on every wait for the server.

The engine hop sits on every call the proxy serves, and aiohttp spent ~0.3 ms of CPU per request
there (its client builds a dozen objects per call for cookies, redirects, tracing and URL
handling that an engine server never needs). This client is an `asyncio.Protocol` around
httptools' parser (the one uvicorn serves with): a request is one `transport.write`, a response
is filled in by parser callbacks, ~0.07 ms of CPU in all.

What it does not do, on purpose: redirects, cookies, proxies, compression, HTTP/2. TLS works
(`https://` base URLs). A connection is reused only when the server allows keep-alive and the
previous response was read to its end; a response left unread is closed with its connection,
which is how vLLM and SGLang learn that the client went away and abort the request.

Errors are this module's own (`ConnectFailed`, `ConnectTimeout`, `ReadTimeout`,
`ConnectionDropped`, `ProtocolError`); `rltap.engines._http` maps them to rltap's errors.

Usage:
    client = HTTP1Client("http://127.0.0.1:8000", headers={"Content-Type": "application/json"})
    response = await client.request("POST", "/v1/completions", b'{"prompt": [1, 2]}')
    body = await response.read()
    await client.close()
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

__all__ = [
    "ConnectFailed",
    "ConnectTimeout",
    "ConnectionDropped",
    "HTTP1Client",
    "HTTP1Error",
    "HTTP1Response",
    "ProtocolError",
    "ReadTimeout",
]

# A streamed body that piles up beyond this while nobody reads it stops the socket reads.
_HIGH_WATER = 4 * 1024 * 1024


class HTTP1Error(Exception):
    """Any failure of a request sent by `HTTP1Client`."""


class ConnectFailed(HTTP1Error):
    """The server could not be reached (refused, unknown host, unreachable network)."""


class ConnectTimeout(ConnectFailed):
    """The server did not accept a connection within `connect_timeout`."""


class ReadTimeout(HTTP1Error, TimeoutError):
    """The server sent nothing within `timeout` while a response was awaited."""


class ConnectionDropped(HTTP1Error):
    """The connection closed before the response was complete."""


class ProtocolError(HTTP1Error):
    """The server's bytes are not valid HTTP/1.1."""


class HTTP1Response:
    """A response whose head has arrived; its body arrives as the server sends it."""

    def __init__(self, connection: _Connection, timeout: float | None) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._connection = connection
        self._timeout = timeout
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._head_done = False
        self._complete = False
        self._error: HTTP1Error | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.received_bytes = False

    @property
    def at_eof(self) -> bool:
        """Whether the whole body has arrived and been read."""
        return self._complete and not self._chunks

    async def read(self) -> bytes:
        """The rest of the body."""
        parts = [chunk async for chunk in self.iter_chunks()]
        return b"".join(parts)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive, until the body ends."""
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                self._connection.maybe_resume()
                yield chunk
            if self._complete:
                return
            if self._error is not None:
                raise self._error
            await self._wait()

    def close(self) -> None:
        """Drop the connection unless the body was read to its end (the server sees a client
        that went away); waits in progress fail with `ConnectionDropped`."""
        if not self._complete:
            self._connection.close()
            self._fail(ConnectionDropped("the response was closed before its end"))

    # --- called by the connection --------------------------------------------------------

    async def wait_head(self) -> None:
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait()

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers
        self._head_done = True
        self._wake()

    def on_body(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        self._wake()

    def on_complete(self) -> None:
        self._complete = True
        self._wake()

    def on_lost(self, exc: HTTP1Error) -> None:
        if not self._complete:
            self._fail(exc)

    @property
    def buffered(self) -> int:
        return self._buffered

    def _fail(self, exc: HTTP1Error) -> None:
        if self._error is None:
            self._error = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        timer = None
        if self._timeout is not None:
            timer = loop.call_later(self._timeout, self._on_timeout, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _on_timeout(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            waiter.set_exception(ReadTimeout(f"no data within {self._timeout:g} s"))
            # A silent server keeps the request; dropping the connection makes it stop.
            self._connection.close()


class _Connection(asyncio.Protocol):
    """One socket to the server; httptools calls back into the response being received."""

    def __init__(self, pool: HTTP1Client) -> None:
        self._pool = pool
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._response: HTTP1Response | None = None
        self._headers: dict[str, str] = {}
        self._paused = False
        self._delimited = False  # the body has a length or is chunked (else: until close)
        self.closed = False

    # --- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not an `asyncio.Transport` subclass, but has its methods.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        response = self._response
        if response is None:  # bytes nobody asked for: the connection cannot be trusted
            self.close()
            return
        response.received_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._end(ProtocolError(f"invalid HTTP from the server: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        response = self._response
        if response is not None and response.status and not self._delimited and exc is None:
            response.on_complete()  # a body delimited by the end of the connection
            self._end(None)
        else:
            reason = f": {exc}" if exc else ""
            self._end(ConnectionDropped(f"the server closed the connection{reason}"))

    # --- httptools callbacks --------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        headers, self._headers = self._headers, {}
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._delimited = chunked or "content-length" in headers
        if self._response is not None:
            self._response.on_head(self._parser.get_status_code(), headers)

    def on_body(self, body: bytes) -> None:
        response = self._response
        if response is not None:
            response.on_body(body)
            if response.buffered > _HIGH_WATER and not self._paused and self._transport:
                self._paused = True
                self._transport.pause_reading()

    def on_message_complete(self) -> None:
        response = self._response
        if response is None:
            return
        response.on_complete()
        if self._parser.should_keep_alive():
            self._end(None)
        else:
            self.close()

    # --- used by the client and the response ----------------------------------------------

    def send(self, data: bytes, response: HTTP1Response) -> None:
        assert self._transport is not None
        self._response = response
        self._transport.write(data)

    def maybe_resume(self) -> None:
        if self._paused and self._transport is not None:
            response = self._response
            if response is None or response.buffered == 0:
                self._paused = False
                self._transport.resume_reading()

    def close(self) -> None:
        """Close the socket; a response still being received fails."""
        if self._response is not None:
            self._end(ConnectionDropped("the connection was closed before the response ended"))
        if not self.closed:
            self.closed = True
            if self._transport is not None:
                self._transport.close()

    def _end(self, error: HTTP1Error | None) -> None:
        """The current request is over: complete (`error` None) or failed."""
        response, self._response = self._response, None
        if response is None:
            return
        if error is not None:
            response.on_lost(error)
        self._pool.released(self, reusable=error is None and not self.closed)


class HTTP1Client:
    """Requests to one server (`base_url`), over a pool of keep-alive connections.

    `timeout` bounds each wait for the server (the head, then every body chunk);
    `connect_timeout` bounds opening a connection; `max_connections` (0: no limit) bounds the
    requests in flight at once, further requests wait for one to end.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = 600.0,
        connect_timeout: float = 10.0,
        max_connections: int = 0,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            msg = f"not an http(s) URL: {base_url!r}"
            raise ValueError(msg)
        secure = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if secure else 80)
        self._ssl = ssl.create_default_context() if secure else None
        self._prefix = parts.path.rstrip("/")
        host = f"[{self._host}]" if ":" in self._host else self._host
        if parts.port is not None:
            host = f"{host}:{self._port}"
        lines = [f"Host: {host}", "User-Agent: rltap", "Accept: */*"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        self._header_block = "".join(f"{line}\r\n" for line in lines).encode("latin-1")
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._slots = asyncio.Semaphore(max_connections) if max_connections > 0 else None
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def request(self, method: str, path: str, body: bytes | None = None) -> HTTP1Response:
        """Send a request; return once the response head arrived (the body follows)."""
        head = f"{method} {self._prefix}{path} HTTP/1.1\r\n".encode("latin-1")
        head += self._header_block
        if body is not None:
            head += b"Content-Length: %d\r\n" % len(body)
        message = head + b"\r\n" + (body or b"")
        if self._slots is not None:
            await self._slots.acquire()
        idle = self._take_idle()
        if idle is not None:
            response = await self._exchange(idle, message, stale_ok=True)
            if response is not None:
                return response
            # The server had closed the idle connection and never saw the request: once more.
            if self._slots is not None:
                await self._slots.acquire()
        try:
            connection = await self._connect()
        except BaseException:
            if self._slots is not None:
                self._slots.release()
            raise
        response = await self._exchange(connection, message, stale_ok=False)
        assert response is not None
        return response

    async def close(self) -> None:
        """Close every connection; requests in flight fail with `ConnectionDropped`."""
        for connection in list(self._open):
            connection.close()
        self._idle.clear()
        self._open.clear()

    # --- called by connections ------------------------------------------------------------

    def released(self, connection: _Connection, *, reusable: bool) -> None:
        """A request on `connection` ended (its slot frees); keep the connection if it can serve
        another."""
        if self._slots is not None:
            self._slots.release()
        if reusable and connection in self._open:
            self._idle.append(connection)

    def forget(self, connection: _Connection) -> None:
        self._open.discard(connection)

    # --- internals ------------------------------------------------------------------------

    async def _exchange(
        self, connection: _Connection, message: bytes, *, stale_ok: bool
    ) -> HTTP1Response | None:
        response = HTTP1Response(connection, self._timeout)
        connection.send(message, response)
        try:
            await response.wait_head()
        except ConnectionDropped:
            if stale_ok and not response.received_bytes:
                return None
            raise
        except BaseException:
            connection.close()
            raise
        return response

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        connection = _Connection(self)
        try:
            async with asyncio.timeout(self._connect_timeout):
                await loop.create_connection(
                    lambda: connection,
                    self._host,
                    self._port,
                    ssl=self._ssl,
                    server_hostname=self._host if self._ssl else None,
                )
        except TimeoutError as exc:
            msg = f"no connection within {self._connect_timeout:g} s"
            raise ConnectTimeout(msg) from exc
        except OSError as exc:
            raise ConnectFailed(str(exc) or type(exc).__name__) from exc
        self._open.add(connection)
        return connection
