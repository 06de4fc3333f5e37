"""One generation request answered in an API's wire format, over HTTP or in process.

The proxy routes and the direct client (`rltap.client`) both hand a parsed body to `reply`: a
non-streaming request comes back as the API's JSON body, a streaming one as SSE bytes. Errors that
happen before the first event raise, so the caller still answers with a plain error status;
errors after it are sent as the API's error event and end the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rltap.errors import InvalidRequest, RltapError
from rltap.protocols import anthropic_messages, openai_chat, openai_responses
from rltap.protocols.base import Api, CanonicalRequest, Generation, GenerationEnd, StreamEvent
from rltap.proxy.sse import format_sse
from rltap.session import Session

__all__ = ["PROTOCOLS", "JsonReply", "StreamReply", "api_for_path", "parse", "reply"]

PROTOCOLS: dict[Api, ModuleType] = {
    "chat": openai_chat,
    "responses": openai_responses,
    "messages": anthropic_messages,
}
_PAYLOAD_FIELD: dict[Api, str] = {
    "chat": "completion",
    "responses": "response",
    "messages": "anthropic_message",
}
_PATH_SUFFIXES: tuple[tuple[str, Api], ...] = (
    ("/chat/completions", "chat"),
    ("/responses", "responses"),
    ("/messages", "messages"),
)

OnDone = Callable[[list[Generation]], None]


def api_for_path(path: str) -> Api:
    """The API a request path belongs to (`/v1/chat/completions` -> "chat")."""
    for suffix, api in _PATH_SUFFIXES:
        if path.rstrip("/").endswith(suffix):
            return api
    msg = f"no generation API at {path}"
    raise InvalidRequest(msg)


def parse(api: Api, body: dict[str, Any], known: Sequence[dict[str, Any]] = ()) -> CanonicalRequest:
    """`body` as a canonical request; `known`: the session's last messages (see
    `openai_chat.parse_request`, the API whose clients resend the whole history)."""
    if api == "chat":
        return openai_chat.parse_request(body, known)
    request: CanonicalRequest = PROTOCOLS[api].parse_request(body)
    return request


@dataclass(slots=True)
class JsonReply:
    body: dict[str, Any]
    generations: list[Generation]


@dataclass(slots=True)
class StreamReply:
    chunks: AsyncIterator[bytes]


async def reply(
    session: Session, request: CanonicalRequest, on_done: OnDone | None = None
) -> JsonReply | StreamReply:
    """Generate `request` in `session`; `on_done` runs once when it finished, failed or was cut."""
    if not request.stream:
        generations: list[Generation] = []
        try:
            generations = await session.generate(request)
        finally:
            if on_done is not None:
                on_done(generations)
        body: dict[str, Any] = PROTOCOLS[request.api].build_response(request, generations)
        _attach(session, request.api, generations, body)
        return JsonReply(body, generations)
    events = aiter(session.stream(request))
    try:
        first = await anext(events)
    except BaseException:
        await _close(events)
        if on_done is not None:
            on_done([])
        raise
    return StreamReply(_sse(session, request, first, events, on_done))


def _attach(session: Session, api: Api, generations: list[Generation], body: Any) -> None:
    """Keep the API's reply object on each interaction (the seed's completion/response)."""
    field = _PAYLOAD_FIELD[api]
    for generation in generations:
        interaction = session.cache.get(generation.interaction_id)
        if interaction is not None:
            setattr(interaction, field, body)


async def _sse(
    session: Session,
    request: CanonicalRequest,
    first: StreamEvent,
    events: AsyncIterator[StreamEvent],
    on_done: OnDone | None,
) -> AsyncIterator[bytes]:
    encoder = PROTOCOLS[request.api].StreamEncoder(request)
    generations: list[Generation] = []
    event: StreamEvent | None = first
    try:
        while event is not None:
            if isinstance(event, GenerationEnd):
                generations.append(event.generation)
            for sse in encoder.encode(event):
                yield format_sse(sse)
            event = await anext(events, None)
        protocol = PROTOCOLS[request.api]
        generations.sort(key=lambda g: g.index)
        _attach(session, request.api, generations, protocol.build_response(request, generations))
        for sse in encoder.finish():
            yield format_sse(sse)
    except RltapError as exc:
        for sse in encoder.error(exc):
            yield format_sse(sse)
    finally:
        await _close(events)
        if on_done is not None:
            on_done(generations)


async def _close(events: AsyncIterator[StreamEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
