"""rltap's exception hierarchy, the one place that knows each HTTP status.

Code raises these; the proxy turns them into the OpenAI or Anthropic error envelope. Where
AReaL raises a builtin for the same mistake, the rltap error is that builtin too, so code written
for AReaL catches it: every `InvalidRequest` is a `ValueError`, `InteractionNotFound` a `KeyError`.

    RltapError (500)
    ├── InvalidRequest (400, ValueError)
    │   ├── ContextLengthExceeded (400, code context_length_exceeded)
    │   └── InvalidReward (400)
    ├── AuthenticationError (401)
    ├── PermissionDenied (403)
    ├── NotFound (404)
    │   ├── InteractionNotFound (404, KeyError)
    │   └── ThreadNotFound (404: an Anthropic `thread` continues a message the session lacks)
    ├── Conflict (409)
    │   └── ExportMismatch (409: a child's prompt does not extend its parent's tokens)
    ├── SessionGone (410)
    ├── PayloadTooLarge (413)
    ├── CapacityExhausted (429, retry_after)
    ├── StoreUnavailable (503: the durable capture store could not record a call)
    └── EngineError (502; is_retryable)
        ├── EngineUnavailable (503, retryable)
        │   └── EngineServerFailed (503: a server rltap launched exited or never got healthy)
        └── EngineTimeout (504, retryable)
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "CapacityExhausted",
    "Conflict",
    "ContextLengthExceeded",
    "EngineError",
    "EngineServerFailed",
    "EngineTimeout",
    "EngineUnavailable",
    "ExportMismatch",
    "InteractionNotFound",
    "InvalidRequest",
    "InvalidReward",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "ProxyStartFailed",
    "RltapError",
    "SessionGone",
    "StoreUnavailable",
    "Terminated",
    "ThreadNotFound",
    "error_for_status",
]


class Terminated(BaseException):
    """rltap was sent `signum` (SIGTERM) while it held processes of its own (`--launch`'s engine
    servers). Raised in the main thread, as Ctrl-C raises KeyboardInterrupt, so every cleanup
    runs and the servers stop; `rltap` then exits with 128 + `signum`, as a process the signal
    ended would. Not an `Exception`: no `except Exception` may swallow a request to stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"rltap received signal {signum}")
        self.signum = signum


class RltapError(Exception):
    """Base of every error rltap raises on purpose.

    `status_code` is the HTTP status, `error_type` the OpenAI-style `type` field and `code` the
    optional machine-readable `code` field of the error body.
    """

    status_code: int = 500
    error_type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return self.message  # not KeyError's repr() of it


class InvalidRequest(RltapError, ValueError):
    status_code = 400
    error_type = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class InvalidReward(InvalidRequest):
    code = "invalid_reward"


class AuthenticationError(RltapError):
    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(RltapError):
    status_code = 403
    error_type = "permission_error"


class NotFound(RltapError):
    status_code = 404
    error_type = "not_found_error"


class InteractionNotFound(NotFound, KeyError):
    code = "interaction_not_found"


class ThreadNotFound(NotFound):
    # Anthropic's `error_code`: the SDK's thread then replays the whole history.
    code = "thread_not_found"


class Conflict(RltapError):
    status_code = 409
    error_type = "conflict_error"


class ExportMismatch(Conflict):
    code = "token_prefix_mismatch"


class SessionGone(RltapError):
    status_code = 410
    error_type = "invalid_request_error"
    code = "session_ended"


class PayloadTooLarge(RltapError):
    status_code = 413
    error_type = "request_too_large"


class CapacityExhausted(RltapError):
    status_code = 429
    error_type = "rate_limit_error"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StoreUnavailable(RltapError):
    """The capture store (`rltap serve --store`) failed to write: the reply is not sent as if
    it were recorded."""

    status_code = 503
    error_type = "server_error"
    code = "store_unavailable"


class EngineError(RltapError):
    """The inference engine failed. `is_retryable` says whether the same request may succeed."""

    status_code = 502
    error_type = "api_error"
    code = "engine_error"

    def __init__(self, message: str, *, is_retryable: bool = False) -> None:
        super().__init__(message)
        self.is_retryable = is_retryable


class EngineUnavailable(EngineError):
    status_code = 503
    error_type = "overloaded_error"
    code = "engine_unavailable"

    def __init__(self, message: str, *, is_retryable: bool = True) -> None:
        super().__init__(message, is_retryable=is_retryable)


class EngineServerFailed(EngineUnavailable):
    """An engine server rltap started (`--launch`) exited, or did not answer /health in time;
    the message names it and quotes its log's last lines. It ends the run (`rltap` exits with
    `rltap.cli.EXIT_ENGINE`)."""

    code = "engine_server_failed"

    def __init__(self, message: str, *, is_retryable: bool = False) -> None:
        super().__init__(message, is_retryable=is_retryable)


class ProxyStartFailed(RltapError):
    """`rltap serve`'s HTTP server did not start; uvicorn logged why just before (a port
    taken, ...)."""


class EngineTimeout(EngineError):
    status_code = 504
    error_type = "timeout_error"
    code = "engine_timeout"

    def __init__(self, message: str, *, is_retryable: bool = True) -> None:
        super().__init__(message, is_retryable=is_retryable)


_BY_STATUS: dict[int, type[RltapError]] = {
    400: InvalidRequest,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    410: SessionGone,
    413: PayloadTooLarge,
    429: CapacityExhausted,
    502: EngineError,
    503: EngineUnavailable,
    504: EngineTimeout,
}


def error_for_status(status: int, message: str) -> RltapError:
    """The rltap error an HTTP status from the proxy stands for (the client side of the table)."""
    kind = _BY_STATUS.get(status)
    if kind is None:
        kind = EngineError if status >= 500 else InvalidRequest
    error = kind(message)
    if kind is RltapError or type(error).status_code != status:
        error.status_code = status
    return error
