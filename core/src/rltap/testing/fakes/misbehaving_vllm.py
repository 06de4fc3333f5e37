"""A vLLM-compatible server that misbehaves on purpose, for rltap's real `VLLMEngine`.

It speaks the fields `rltap.testing.fakes.vllm` does (`/v1/completions` with a token-id prompt in;
`prompt_token_ids`, `token_ids`, `logprobs.token_logprobs`, `finish_reason` out; SSE when
`stream`), over raw HTTP/1.1 on a socket, so a fault can be exactly what a failing engine does:
an error status, silence, or a connection cut in the middle of a body. The request's `max_tokens`
picks the behaviour (`Fault`); any other value is answered at once with `reply_ids`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
from typing import Any

__all__ = ["Fault", "MisbehavingVLLM"]


class Fault(enum.IntEnum):
    """What the server does with a request, chosen by the request's `max_tokens`."""

    STATUS_500 = 901  # {"error": ...} with HTTP 500
    STATUS_503 = 902  # HTTP 503, as an overloaded or restarting server answers
    SILENT = 903  # reads the request, then says nothing until the test ends
    DROP = 904  # sends part of the body (two tokens when streaming), then resets the connection
    TRICKLE = 905  # streams a token every 20 ms, 500 in all: a long generation


class MisbehavingVLLM:
    """Usage:
    async with MisbehavingVLLM(reply_ids) as server:
        engine = VLLMEngine(server.url, model="fake", timeout=1.0)
    """

    def __init__(self, reply_ids: list[int]) -> None:
        self.reply_ids = reply_ids
        self.received: list[int] = []  # max_tokens of each completion request, as they arrive
        self.trickled = 0  # tokens sent by TRICKLE streams
        self.disconnects = 0  # TRICKLE streams whose client went away before the end
        self._release = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self.url = ""

    async def __aenter__(self) -> MisbehavingVLLM:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def release(self) -> None:
        """End every SILENT request (the connection closes without an answer)."""
        self._release.set()

    async def __aexit__(self, *exc: object) -> None:
        self._release.set()
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in header_lines if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            await self._answer(request_line.split()[1], body, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._handlers.discard(task)

    async def _answer(
        self, path: str, raw: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if path == "/v1/models":
            await _send_json(writer, 200, {"object": "list", "data": [{"id": "fake"}]})
            return
        body = json.loads(raw)
        max_tokens = int(body.get("max_tokens") or 0)
        self.received.append(max_tokens)
        prompt: list[int] = body["prompt"]
        if max_tokens == Fault.STATUS_500:
            await _send_json(writer, 500, {"error": {"message": "engine exploded", "code": 500}})
        elif max_tokens == Fault.STATUS_503:
            await _send_json(writer, 503, {"error": {"message": "engine overloaded"}})
        elif max_tokens == Fault.SILENT:
            await self._release.wait()
        elif max_tokens == Fault.DROP and not body.get("stream"):
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 900\r\n"
            writer.write(head + b"\r\n" + b'{"id": "cmpl-cut", "choices": [')
            await writer.drain()
            writer.transport.abort()
        elif body.get("stream"):
            await self._stream(writer, reader, prompt, max_tokens)
        else:
            ids = self.reply_ids[:max_tokens]
            finish = "stop" if len(ids) == len(self.reply_ids) else "length"
            await _send_json(writer, 200, _completion(prompt, ids, finish))

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        reader: asyncio.StreamReader,
        prompt: list[int],
        max_tokens: int,
    ) -> None:
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        writer.write(head)
        if max_tokens == Fault.TRICKLE:
            ids, delay = [self.reply_ids[0]] * 500, 0.02
        else:
            ids, delay = self.reply_ids[:max_tokens], 0.0
        client_gone = asyncio.ensure_future(reader.read(1))  # b"" once the client closes
        try:
            for position, token in enumerate(ids):
                if max_tokens == Fault.DROP and position == 2:
                    writer.transport.abort()
                    return
                if delay:
                    done, _ = await asyncio.wait({client_gone}, timeout=delay)
                    if done:
                        self.disconnects += 1
                        return
                    self.trickled += 1
                last = position == len(ids) - 1
                finish = ("stop" if max_tokens != Fault.TRICKLE else "length") if last else None
                event = _completion(prompt, [token], finish)
                _write_chunk(writer, b"data: " + json.dumps(event).encode() + b"\n\n")
                await writer.drain()
            _write_chunk(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            client_gone.cancel()


def _completion(prompt: list[int], ids: list[int], finish: str | None) -> dict[str, Any]:
    choice = {
        "index": 0,
        "text": "",
        "prompt_token_ids": prompt,
        "token_ids": ids,
        "logprobs": {"token_logprobs": [-0.5] * len(ids)},
        "finish_reason": finish,
    }
    return {"id": "cmpl-fake", "object": "text_completion", "model": "fake", "choices": [choice]}


def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


async def _send_json(writer: asyncio.StreamWriter, status: int, body: Any) -> None:
    data = json.dumps(body).encode()
    reason = {200: "OK", 500: "Internal Server Error", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + data)
    await writer.drain()
