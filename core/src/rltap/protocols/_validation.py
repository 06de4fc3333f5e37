"""Turn a pydantic `ValidationError` on a request body into rltap's `InvalidRequest`.

Every protocol's request model is validated by pydantic; the client must see a 400 naming the
offending parameter, written the way API error bodies write it: `messages[0].content[1].type`.

Pydantic puts the labels of union members into an error's location (`str`, `list[Part]`,
`literal['auto','none']`, a model class name); those are not parameters and are dropped. The
error reported is the first one, or, among the errors at or below its parameter (the members of
one union), the one that got deepest, since that is the member the client most likely meant.
The tag of a discriminated union is a plain value and stays in the path (`content[1].tool_use`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from rltap.record.errors import InvalidRequest

__all__ = ["errors_to_invalid_request", "format_param", "validation_error_to_invalid_request"]

_TYPE_LABELS = frozenset(
    {"str", "int", "float", "bool", "dict", "list", "tuple", "set", "none", "bytes", "any"}
)


def _is_union_label(entry: str) -> bool:
    # API parameters are snake_case names; labels are type reprs or CamelCase class names.
    return entry in _TYPE_LABELS or any(c in entry for c in "[](),-' ") or entry[:1].isupper()


def _param_path(loc: Sequence[int | str]) -> tuple[int | str, ...]:
    return tuple(e for e in loc if isinstance(e, int) or not _is_union_label(e))


def format_param(path: Sequence[int | str]) -> str | None:
    """`("messages", 0, "content")` -> `"messages[0].content"`; an empty path -> None."""
    text = ""
    for entry in path:
        text += f"[{entry}]" if isinstance(entry, int) else (f".{entry}" if text else entry)
    return text or None


def validation_error_to_invalid_request(
    exc: ValidationError, prefix: tuple[int | str, ...] = ()
) -> InvalidRequest:
    """The `InvalidRequest` (400) for a request body that failed pydantic validation.

    `prefix` is where the validated value sits in the body, when a part was validated alone
    (`("messages", 3)` for one message).

    Usage:
        try:
            body = ChatCompletionRequest.model_validate(raw)
        except ValidationError as exc:
            raise validation_error_to_invalid_request(exc) from exc
    """
    return errors_to_invalid_request(exc.errors(include_url=False, include_input=False), prefix)


def errors_to_invalid_request(
    errors: Sequence[Mapping[str, Any]], prefix: tuple[int | str, ...] = ()
) -> InvalidRequest:
    """The `InvalidRequest` for pydantic's error list (`ValidationError.errors()`, or FastAPI's
    `RequestValidationError.errors()` with `prefix` already stripped from each `loc`)."""
    if not errors:
        return InvalidRequest("invalid request body")
    head = prefix + _param_path(errors[0]["loc"])
    best = errors[0]
    best_path = head
    for error in errors[1:]:
        path = prefix + _param_path(error["loc"])
        if path[: len(head)] == head and len(path) > len(best_path):
            best, best_path = error, path
    param = format_param(best_path)
    if best["type"] == "missing" and param is None:
        message = "the request body is empty; send a JSON object"
    elif best["type"] == "missing":
        message = f"Missing required parameter: '{param}'."
    elif param is None:
        message = f"Invalid request body: {best['msg']}."
    else:
        message = f"Invalid value for '{param}': {best['msg']}."
    return InvalidRequest(message, param=param)
