"""A request body as a JSON object, refused clearly when it is anything else.

The proxy's routes and the direct client both parse bodies here (orjson), so that every client
mistake is an `InvalidRequest` (400), never a 500.
"""

from __future__ import annotations

from typing import Any

import orjson

from rltap.record.errors import InvalidRequest

__all__ = ["MAX_DEPTH", "parse_json"]

# Deeper bodies are refused: the recursive steps after parsing (canonical forms, templates,
# re-serialising for export, whose orjson stops at 254 levels) must never meet them.
MAX_DEPTH = 128


def parse_json(raw: bytes, *, allow_empty: bool = False) -> dict[str, Any]:
    """`raw` as a JSON object; `InvalidRequest` for anything else (never a 500)."""
    if not raw.strip():
        if allow_empty:
            return {}
        msg = "the request body is empty; send a JSON object"
        raise InvalidRequest(msg)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        msg = f"the request body is not valid JSON: {exc}"
        raise InvalidRequest(msg) from None
    if not isinstance(body, dict):
        msg = f"the request body must be a JSON object, not {type(body).__name__}"
        raise InvalidRequest(msg)
    # Counting brackets is cheap; only a body with that many can nest that deep.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _nests_deeper(body, MAX_DEPTH):
        msg = f"the request body nests arrays and objects more than {MAX_DEPTH} levels deep"
        raise InvalidRequest(msg)
    return body


def _nests_deeper(value: Any, limit: int) -> bool:
    level: list[Any] = [value]
    for _ in range(limit):  # one level of containers at a time: each is visited once
        deeper: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            deeper.extend(c for c in children if type(c) is dict or type(c) is list)
        if not deeper:
            return False
        level = deeper
    return True
