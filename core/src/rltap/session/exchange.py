"""One generation request answered in an API's wire format, over HTTP or in process.

The proxy routes and the direct client (`rltap.client.direct`) both hand a parsed body to `reply`: a
non-streaming request comes back as the API's JSON body, a streaming one as SSE bytes. Errors that
happen before the first event raise, so the caller still answers with a plain error status;
errors after it are sent as the API's error event and end the stream.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from rltap.protocols import ApiSpec, spec_named
from rltap.protocols.sse import format_sse
from rltap.record.errors import RltapError
from rltap.record.generation import CanonicalRequest, Generation, GenerationEnd, StreamEvent
from rltap.session.session import Session

__all__ = ["JsonReply", "StreamReply", "reply"]

OnDone = Callable[[list[Generation]], None]


@dataclass(slots=True)
class JsonReply:
    body: dict[str, Any]
    generations: list[Generation]


@dataclass(slots=True)
class StreamReply:
    chunks: AsyncGenerator[bytes, None]


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
        spec = spec_named(request.api)
        body = spec.build_response(request, generations)
        _attach(session, spec, generations, body)
        # The reply goes out once its calls are in the capture store's hands (if it has one).
        await session.cache.durable()
        return JsonReply(body, generations)
    events = session.stream(request)
    try:
        first = await anext(events)
    except BaseException:
        await events.aclose()
        if on_done is not None:
            on_done([])
        raise
    return StreamReply(_sse(session, request, first, events, on_done))


def _attach(session: Session, spec: ApiSpec, generations: list[Generation], body: Any) -> None:
    """Keep the reply body on each of its interactions, under the API's name (a stored
    Responses body is read back; `rltap.areal` shows them as AReaL's completion/response)."""
    for generation in generations:
        interaction = session.cache.get(generation.interaction_id)
        if interaction is not None:
            interaction.reply_bodies[spec.name] = body


async def _sse(
    session: Session,
    request: CanonicalRequest,
    first: StreamEvent,
    events: AsyncGenerator[StreamEvent, None],
    on_done: OnDone | None,
) -> AsyncGenerator[bytes, None]:
    spec = spec_named(request.api)
    encoder = spec.stream_encoder(request)
    generations: list[Generation] = []
    event: StreamEvent | None = first
    try:
        while event is not None:
            if isinstance(event, GenerationEnd):
                generations.append(event.generation)
            for sse in encoder.encode(event):
                yield format_sse(sse)
            event = await anext(events, None)
        generations.sort(key=lambda g: g.index)
        _attach(session, spec, generations, spec.build_response(request, generations))
        await session.cache.durable()  # the stream ends once its calls are in the store's hands
        for sse in encoder.finish():
            yield format_sse(sse)
    except RltapError as exc:
        for sse in encoder.error(exc):
            yield format_sse(sse)
    finally:
        await events.aclose()
        if on_done is not None:
            on_done(generations)
