"""The HTTP engines' one seam to their server: `EngineHTTPClient`, on aiohttp, and SSE reading.

Everything the client raises leaves it as an `EngineError` (see `rltap.engines._http_errors`);
an HTTP error status is one too, with the engine's own message.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import aiohttp
import orjson

from rltap.engines._http_errors import error_for_status, map_http_errors

__all__ = ["EngineHTTPClient", "HTTPReply", "iter_sse_data"]

_KEEPALIVE_SECONDS = 4.0


async def iter_sse_data(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """Yield the `data` payload of each server-sent event until `[DONE]` or the body ends.

    Lines are split here rather than by `StreamReader.readline`, whose line-length limit a
    cumulative SGLang chunk (every logprob so far, in one line) can exceed.
    """
    buffer = bytearray()
    data: list[bytes] = []
    async for piece in response.content.iter_any():
        buffer += piece
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
            elif not line and data:
                payload = b"\n".join(data)
                data = []
                if payload == b"[DONE]":
                    return
                yield payload
        del buffer[:start]
    if data and (payload := b"\n".join(data)) != b"[DONE]":
        yield payload


class HTTPReply(NamedTuple):
    """A reply whatever its status (`EngineHTTPClient.request`)."""

    status: int
    data: Any  # the decoded JSON body; None when empty or not JSON, as some routes answer
    payload: bytes


class EngineHTTPClient:
    """An aiohttp session to one engine server, opened lazily on the running event loop.

    `timeout` bounds how long the engine may stay silent (the wait for the response head, then
    the gap between two body chunks); `connect_timeout` bounds opening a connection;
    `max_connections` (0: no limit) bounds the requests in flight, further ones wait their turn.
    Connections are kept alive between requests; a response left before its end closes its
    connection, which is how vLLM and SGLang learn that the client went away.

    Usage:
        client = EngineHTTPClient("http://127.0.0.1:8000", engine="vLLM")
        data = await client.post_json("/v1/completions", body)
        async with client.post("/v1/completions", {**body, "stream": True}) as response:
            async for payload in iter_sse_data(response):
                ...
        await client.close()
    """

    def __init__(
        self,
        base_url: str,
        *,
        engine: str,
        api_key: str | None = None,
        timeout: float | None = 600.0,
        connect_timeout: float = 10.0,
        max_connections: int = 0,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            msg = f"not an http(s) URL: {base_url!r}"
            raise ValueError(msg)
        self.base_url = base_url.rstrip("/")
        self.engine = engine
        self._headers = {"Content-Type": "application/json", "User-Agent": "rltap"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=timeout
        )
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def detached(self) -> EngineHTTPClient:
        """A client to the same server with the same key and timeouts but connections of its
        own, without a connection limit: a call on it never waits behind this client's
        requests in flight (which a paused server does not answer)."""
        other = copy.copy(self)
        other._max_connections = 0
        other._session = None
        other._loop = None
        return other

    def session(self) -> aiohttp.ClientSession:
        """The session for the running loop (a new loop, as in tests, gets a new session)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections,
                    # Under uvicorn's 5 s (vLLM and SGLang serve with it), so an idle connection is
                    # dropped here before the server closes it under a request being sent.
                    keepalive_timeout=_KEEPALIVE_SECONDS,
                ),
                timeout=self._timeout,
                headers=self._headers,
                cookie_jar=aiohttp.DummyCookieJar(),  # an engine server sets no cookies
            )
            self._loop = loop
        return self._session

    @contextlib.asynccontextmanager
    async def post(self, path: str, body: dict[str, Any]) -> AsyncIterator[aiohttp.ClientResponse]:
        """POST `body` as JSON; yield the response once its status is known to be a success.

        Leaving the block before the body is read closes the connection.
        """
        url = self.base_url + path
        with map_http_errors(self.engine, url):
            request = self.session().post(url, data=orjson.dumps(body), allow_redirects=False)
            async with request as response:
                if response.status >= 400:
                    raise error_for_status(self.engine, response.status, await response.read())
                try:
                    yield response
                finally:
                    if not response.content.at_eof():
                        response.close()

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body` as JSON and decode the JSON reply. Cancelled before the reply is read,
        it closes the connection."""
        return await self._call_json("POST", path, body)

    async def get_json(self, path: str) -> Any:
        """GET `path` and decode its JSON body."""
        return await self._call_json("GET", path, None)

    async def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, **params: str
    ) -> HTTPReply:
        """Send `body` as JSON to `path` (with query `params`); the reply, whatever its status
        (a server's control routes answer errors that callers read)."""
        url = self.base_url + path
        data = None if body is None else orjson.dumps(body)
        with map_http_errors(self.engine, url):
            request = self.session().request(
                method, url, params=params, data=data, allow_redirects=False
            )
            async with request as response:
                payload = await response.read()
        try:
            decoded = orjson.loads(payload) if payload.strip() else None
        except orjson.JSONDecodeError:
            decoded = None
        return HTTPReply(response.status, decoded, payload)

    async def close(self) -> None:
        """Close the connections; the next request opens new ones."""
        if self._session is not None and not self._session.closed:
            with contextlib.suppress(RuntimeError):  # its loop may already be closed
                await self._session.close()
        self._session = None
        self._loop = None

    async def _call_json(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        url = self.base_url + path
        with map_http_errors(self.engine, url):
            data = None if body is None else orjson.dumps(body)
            request = self.session().request(method, url, data=data, allow_redirects=False)
            async with request as response:
                payload = await response.read()
            if response.status >= 400:
                raise error_for_status(self.engine, response.status, payload)
            return orjson.loads(payload)
