"""`ApiSpec`: everything rltap knows about one wire API, declared in one place.

Each protocol package (`openai_chat`, `openai_responses`, `anthropic_messages`) declares one
`SPEC` in its `__init__`; the registry (`rltap.protocols.SPECS`) is what the proxy's routes, the
direct client, the exchange and the session look up. No other module keeps a table keyed by API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from rltap.protocols._validation import validate_model
from rltap.protocols.operation import OnDone, Operation, SessionPort
from rltap.protocols.sse import SSEEvent
from rltap.record.errors import RltapError
from rltap.record.generation import CanonicalRequest, Generation, StreamEvent
from rltap.record.ids import random_hex

__all__ = ["ApiSpec", "StreamEncoder"]


class StreamEncoder(Protocol):
    """Turns a session's stream events into one API's server-sent events.

    `encode` is called for each event in order, `finish` once after the last, `error` instead of
    `finish` when the generation failed after the stream began (the API's error event).
    """

    def encode(self, event: StreamEvent) -> list[SSEEvent]: ...

    def finish(self) -> list[SSEEvent]: ...

    def error(self, exc: RltapError) -> list[SSEEvent]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiSpec:
    """One wire API.

    Usage:
        SPEC = ApiSpec(
            name="chat", title="OpenAI Chat Completions",
            paths=("/v1/chat/completions", "/chat/completions"),
            request_model=ChatCompletionRequest, to_canonical=to_canonical,
            build_response=build_response, stream_encoder=StreamEncoder,
            error_body=error_body, id_prefix="chatcmpl-",
        )
    """

    name: str
    """The API's name in `CanonicalRequest.api`, metrics labels and logs."""
    title: str
    """A human name, the summary of its routes in the OpenAPI document."""
    paths: tuple[str, ...]
    """Route paths, the canonical one first; the others are aliases (AReaL's, without /v1)."""
    request_model: type[BaseModel]
    """The pydantic model of a request body (lenient: unknown fields are ignored)."""
    to_canonical: Callable[[Any], CanonicalRequest]
    """A validated `request_model` -> the canonical request (cross-field checks raise 400)."""
    build_response: Callable[[CanonicalRequest, list[Generation]], dict[str, Any]]
    """The JSON body of a reply that does not stream."""
    stream_encoder: Callable[[CanonicalRequest], StreamEncoder]
    """A new encoder for one streamed reply."""
    error_body: Callable[[RltapError], dict[str, Any]]
    """The API's error envelope for an error."""
    id_prefix: str
    """How the API's reply ids begin (`chatcmpl-`); interaction ids follow it."""
    operations: tuple[Operation, ...] = ()
    """The API's other routes (`rltap.protocols.operation`): retrieve, count tokens, ..."""
    session_state: Callable[[], object] | None = None
    """A new session's own state of this API (`Session.api_state`), made on first use."""
    in_session: Callable[[Any, SessionPort], tuple[CanonicalRequest, OnDone | None]] | None = None
    """`to_canonical` for bodies that name the session's state (Responses' `conversation`):
    the canonical request, and what to do once its generations finished (or None)."""

    def new_interaction_id(self) -> str:
        """An interaction id in this API's style (`chatcmpl-...`)."""
        return f"{self.id_prefix}{random_hex()}"

    def validate(self, body: Any) -> BaseModel:
        """`body` (a parsed JSON value) as `request_model`; `InvalidRequest` naming the field."""
        return validate_model(self.request_model, body)

    def canonical_in(
        self, body: BaseModel, session: SessionPort
    ) -> tuple[CanonicalRequest, OnDone | None]:
        """A validated body -> the canonical request in `session` (`in_session`, where the
        API has one), and its callback for when the generations finished."""
        if self.in_session is None:
            return self.to_canonical(body), None
        return self.in_session(body, session)

    def parse(self, body: Any) -> CanonicalRequest:
        """A request body -> the canonical request, or `InvalidRequest` (400)."""
        return self.to_canonical(self.validate(body))

    def owns(self, path: str) -> bool:
        """Whether `path` is one of this API's routes or below one (`/v1/messages/...`)."""
        path = path.rstrip("/")
        return any(path == p or path.startswith(p + "/") for p in self.paths)
