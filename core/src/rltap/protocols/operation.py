"""`Operation`: one of an API's extra routes (besides its generation route), declared with it.

An API keeps some state on its server: the Responses API its stored responses and
conversations, and it answers questions about a request without generating (Anthropic's token
count). Each such route is an `Operation` in its `ApiSpec.operations`: method, path template,
the pydantic models of its body and query, and a handler that works on the caller's session
(`SessionPort`: what `rltap.session.Session` offers). Nothing here knows HTTP frameworks: the
proxy mounts every operation of every spec as a route (`rltap.proxy.operations`) and the
direct client answers them in process (`rltap.client.direct.DirectTransport`), both through `run`,
so a body is validated and an error raised the same way in both.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from rltap.protocols._validation import validate_model
from rltap.record.generation import CanonicalRequest, Generation
from rltap.record.types import InteractionWithTokenLogpReward

__all__ = ["InteractionLookup", "OnDone", "Operation", "OperationCall", "SessionPort"]

Method = Literal["GET", "POST", "DELETE"]
OnDone = Callable[[list[Generation]], None]
_PARAM = re.compile(r"\{(\w+)\}")


class InteractionLookup(Protocol):
    """A session's recorded interactions by id (`rltap.tree.cache.InteractionCache`)."""

    def get(self, interaction_id: str) -> InteractionWithTokenLogpReward | None: ...

    def __getitem__(self, interaction_id: str) -> InteractionWithTokenLogpReward: ...


class SessionPort(Protocol):
    """What an operation may do with the caller's session (`rltap.session.Session`)."""

    @property
    def cache(self) -> InteractionLookup: ...

    async def generate(self, request: CanonicalRequest) -> list[Generation]: ...

    def count_tokens(self, request: CanonicalRequest) -> int: ...

    def api_state(self, api: str) -> Any:
        """The session's own state of API `api` (made by its spec's `session_state`)."""
        ...


@dataclass(frozen=True, slots=True)
class OperationCall:
    """One call of an operation: the session, the path's parameters, the validated body and
    query (instances of the operation's models, or None where it declares none), the agent the
    client names."""

    session: SessionPort
    params: Mapping[str, str]
    body: Any
    query: Any
    agent: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One extra route of an API.

    Usage:
        Operation(
            method="GET", path="/v1/responses/{response_id}", summary="Retrieve a response",
            handle=retrieve_response,
        )
    """

    method: Method
    path: str
    """The path template, parameters in braces (`/v1/conversations/{conversation_id}`)."""
    summary: str
    """A human name, the summary of its route in the OpenAPI document."""
    handle: Callable[[OperationCall], Awaitable[dict[str, Any]]]
    """The JSON body of the reply; errors are raised as `RltapError`s."""
    body: type[BaseModel] | None = None
    """The body's model (an empty body is `{}`); None: the operation reads no body."""
    query: type[BaseModel] | None = None
    """The query string's model; None: the operation reads no query."""
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        literal = _PARAM.split(self.path)[::2]  # split keeps the names at the odd places
        groups = [f"(?P<{name}>[^/]+)" for name in self.params]
        pattern = "".join(
            re.escape(part) + group for part, group in zip(literal, [*groups, ""], strict=True)
        )
        object.__setattr__(self, "_pattern", re.compile(f"^{pattern}/?$"))

    @property
    def params(self) -> tuple[str, ...]:
        """The names of the path's parameters, in order."""
        return tuple(_PARAM.findall(self.path))

    def match(self, method: str, path: str) -> dict[str, str] | None:
        """The path's parameters if `method path` is this operation; else None."""
        if method != self.method:
            return None
        found = self._pattern.match(path)
        return None if found is None else found.groupdict()

    async def run(
        self,
        session: SessionPort,
        params: Mapping[str, str],
        *,
        query: Mapping[str, str],
        body: Any = None,
        agent: str | None = None,
    ) -> dict[str, Any]:
        """Validate the body (a parsed JSON value) and query, then answer; `InvalidRequest`
        (400) naming the field of a bad one."""
        call = OperationCall(
            session=session,
            params=params,
            body=None if self.body is None else validate_model(self.body, body),
            query=None if self.query is None else validate_model(self.query, dict(query)),
            agent=agent,
        )
        return await self.handle(call)
