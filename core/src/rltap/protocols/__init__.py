"""The wire APIs rltap speaks, one package each, registered here.

Each package declares its `ApiSpec` (`rltap.protocols.spec`) as `SPEC` in its `__init__`: route
paths and aliases, the pydantic request model and its conversion to a `CanonicalRequest`, the
response builder, the stream encoder, the error envelope, the interaction id prefix, and the
API's other routes (`Operation`s: retrieve, conversations, count tokens) with the per-session
state they keep. The proxy's routes, the direct client, the exchange and the session find
everything through `SPECS`.

Adding an API:
1. Make a package `rltap/protocols/<name>/` with `request.py` (the pydantic model and
   `to_canonical`), `response.py` (`build_response`, `error_body`) and `stream.py` (a
   `StreamEncoder`), and declare `SPEC = ApiSpec(...)` in its `__init__.py`.
   Its other routes are `Operation`s in `SPEC.operations` (`rltap.protocols.operation`).
2. Add its `SPEC` to `_REGISTERED` below. The proxy serves its paths from then on, with the same
   body limit, auth, metrics and error mapping as every route, and the OpenAPI document lists it.
3. Add its tests under `tests/protocols/<name>/` (request, response, stream).
"""

from __future__ import annotations

from rltap.protocols import anthropic_messages, openai_chat, openai_responses
from rltap.protocols.operation import Operation
from rltap.protocols.spec import ApiSpec, StreamEncoder

__all__ = [
    "SPECS",
    "ApiSpec",
    "Operation",
    "StreamEncoder",
    "operation_for",
    "spec_for_path",
    "spec_named",
]

_REGISTERED = (openai_chat.SPEC, openai_responses.SPEC, anthropic_messages.SPEC)

SPECS: dict[str, ApiSpec] = {spec.name: spec for spec in _REGISTERED}


def spec_named(name: str) -> ApiSpec:
    """The spec of the API called `name` (`CanonicalRequest.api`)."""
    return SPECS[name]


def spec_for_path(path: str) -> ApiSpec | None:
    """The API whose route `path` is, or is below (`/v1/messages/count_tokens`); else None."""
    for spec in _REGISTERED:
        if spec.owns(path):
            return spec
    return None


def operation_for(method: str, path: str) -> tuple[ApiSpec, Operation, dict[str, str]] | None:
    """The API, operation and path parameters of `method path`; None if no operation is it."""
    for spec in _REGISTERED:
        for operation in spec.operations:
            params = operation.match(method, path)
            if params is not None:
                return spec, operation, params
    return None
