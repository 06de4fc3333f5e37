"""The shared base of the framework adapters (rltap-openai-agents, rltap-camel, rltap-langchain).

An adapter turns a framework agent into what rltap runs: `async def run(data, **kwargs)`. The
public `run` does the common work (template method, as OpenTelemetry's instrumentors do):

1. the connection: `base_url`, `api_key` and `http_client` from the workflow (inline mode), or
   OPENAI_BASE_URL / OPENAI_API_KEY from the environment (subprocess mode);
2. the subclass's `_run(data, connection)` builds the framework's client on that connection and
   runs the user's agent;
3. the reward: `reward_fn(result, data)` when given, else what `_run` returned;
4. errors: an HTTP error from the proxy, or an error event inside a stream, however deep the
   framework wrapped it, is raised as rltap's own error type (`EngineError` for a 502,
   `SessionGone` for a 410, ...).

Each adapter declares the framework range it is tested on once (`requirement`); constructing an
adapter with another version installed fails with both versions named.

Every adapter package has the same shape: `_adapter.py` (the `AgentAdapter` subclass),
`_client.py` (the framework's model or client on a `Connection`) and `_requirements.py` (the
supported framework range), and the same option names: `api="chat"|"responses"` where the
framework speaks both wire formats, `stream: bool`, `reward_fn: RewardFn`, `input_fn: InputFn`.
Errors are mapped here only; an adapter raises what its framework raised.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar, Literal, get_args

from rltap.record import errors

__all__ = [
    "APIS",
    "AgentAdapter",
    "Api",
    "Connection",
    "FrameworkVersionError",
    "InputFn",
    "RewardFn",
    "check_api",
    "check_framework",
    "rltap_error_from",
]

# reward_fn(result, data) -> reward: a number for the last reply, {interaction_id: reward},
# {agent: reward} (`rltap.tree.reward_targets`), None.
RewardFn = Callable[[Any, Any], Any]
# input_fn(data) -> what the framework's agent is given for a dataset row.
InputFn = Callable[[Any], Any]
# The wire format an adapter's model speaks: /v1/chat/completions or /v1/responses.
Api = Literal["chat", "responses"]
APIS: tuple[Api, ...] = get_args(Api)


def check_api(api: str) -> Api:
    """`api` when it names a wire format (`"chat"`, `"responses"`); raises ValueError otherwise."""
    if api not in APIS:
        msg = f"api must be one of {', '.join(APIS)}, got {api!r}"
        raise ValueError(msg)
    return api


class FrameworkVersionError(ImportError):
    """The installed framework is missing or outside the range the adapter is tested on."""


def check_framework(requirement: str) -> str:
    """The installed version of the framework `requirement` names; raises when it is outside it."""
    from packaging.requirements import Requirement

    wanted = Requirement(requirement)
    try:
        installed = version(wanted.name)
    except PackageNotFoundError:
        msg = f"{wanted.name} is not installed; this adapter supports {requirement}"
        raise FrameworkVersionError(msg) from None
    if not wanted.specifier.contains(installed, prereleases=True):
        msg = (
            f"{wanted.name} {installed} is installed, but this adapter is tested on "
            f"{requirement}; install a supported version"
        )
        raise FrameworkVersionError(msg)
    return installed


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the agent's model lives for one episode: the proxy's /v1 URL, the session key and
    the HTTP client to reach it with (None: the framework makes its own)."""

    base_url: str
    api_key: str
    http_client: Any = None

    @property
    def root_url(self) -> str:
        """The proxy's address without /v1 (what Anthropic clients take)."""
        return self.base_url.removesuffix("/").removesuffix("/v1")

    @classmethod
    def resolve(cls, base_url: str | None, api_key: str | None, http_client: Any) -> Connection:
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not base_url or not api_key:
            msg = (
                "no proxy to talk to: pass base_url and api_key (inline mode) or set "
                "OPENAI_BASE_URL and OPENAI_API_KEY (subprocess mode)"
            )
            raise errors.InvalidRequest(msg)
        return cls(base_url=base_url, api_key=api_key, http_client=http_client)


def _status_of(exc: BaseException) -> tuple[int, str] | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status >= 400:
        return status, str(getattr(exc, "message", None) or exc)
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int) and status >= 400:
        return status, str(exc)
    return None


def _by_type_and_code() -> dict[tuple[str, str | None], type[errors.RltapError]]:
    table: dict[tuple[str, str | None], type[errors.RltapError]] = {}
    pending: list[type[errors.RltapError]] = [errors.RltapError]
    while pending:  # breadth first: a base class keeps a key its subclass repeats
        kind = pending.pop(0)
        table.setdefault((kind.error_type, kind.code), kind)
        pending.extend(kind.__subclasses__())
    return table


_ERRORS_BY_BODY = _by_type_and_code()


def _from_stream_event(exc: BaseException) -> errors.RltapError | None:
    # An error after a stream started arrives as an SSE error event: the SDK raises an error
    # without a status, carrying the proxy's error body (its `type` and `code`).
    body = getattr(exc, "body", None)
    if getattr(exc, "status_code", None) is not None or not isinstance(body, Mapping):
        return None
    error_type = body.get("type")
    if not isinstance(error_type, str):
        return None
    code = body.get("code")
    kind = _ERRORS_BY_BODY.get((error_type, code)) or _ERRORS_BY_BODY.get((error_type, None))
    if kind is None:
        return None
    return kind(f"error event from the proxy: {body.get('message') or exc}")


def rltap_error_from(exc: BaseException) -> errors.RltapError | None:
    """rltap's error for an HTTP status or a streamed error event in `exc`'s cause chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, errors.RltapError):
            return current
        streamed = _from_stream_event(current)
        if streamed is not None:
            return streamed
        found = _status_of(current)
        if found is not None:
            status, message = found
            return errors.error_for_status(status, f"{status} from the proxy: {message}")
        current = current.__cause__ or current.__context__
    return None


class AgentAdapter(abc.ABC):
    """Base of every framework adapter: `run(data, **kwargs)` around the subclass's `_run`.

    Subclasses set `requirement` (e.g. "langchain-openai>=1.0,<2") and implement `_run`.
    `reward_fn(result, data)` turns the agent's result into the episode's reward (a number for
    the last reply, a dict {interaction_id: reward} or {agent: reward}, or None).
    """

    requirement: ClassVar[str]

    def __init__(self, *, reward_fn: RewardFn | None = None, model: str = "rltap") -> None:
        self.framework_version = check_framework(self.requirement)
        self.reward_fn = reward_fn
        self.model = model

    async def run(
        self,
        data: Any,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        http_client: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Run the agent on `data` against the proxy; returns the episode's reward."""
        connection = Connection.resolve(base_url, api_key, http_client)
        try:
            result = await self._run(data, connection, **kwargs)
        except errors.RltapError:
            raise
        except Exception as exc:
            mapped = rltap_error_from(exc)
            if mapped is None:
                raise
            raise mapped from exc
        if self.reward_fn is not None:
            return self.reward_fn(result, data)
        return result

    @abc.abstractmethod
    async def _run(self, data: Any, connection: Connection, **kwargs: Any) -> Any:
        """Build the framework's model client on `connection` and run the agent."""
