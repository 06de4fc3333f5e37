"""Canonical messages: the form in which conversations are compared to find a call's parent.

Agent frameworks send back the history they received in their own serialisation: CAMEL sends an
assistant tool-call message with `content: ""`, the Agents SDK with `content: null`; LangChain
re-serialises tool-call arguments; Responses items carry `id` and `status`. Two messages are the
same turn when their canonical forms are equal. The rules:

- Only `role`, `name`, `content` and `tool_calls` count. Every other key (ids, `status`,
  `refusal`, `annotations`, `audio`, `reasoning_content`, `tool_call_id`, ...) is volatile or does
  not change the rendered tokens, so it is ignored. Keys whose value is None are dropped.
- An assistant message's `name` does not count: the proxy's replies have none, and a framework
  that names its agent stamps the name on the reply it sends back (LangChain's `create_agent`).
- The role `developer` is the role `system`.
- `content` is a list of parts. A string is one text part; `text`, `input_text` and `output_text`
  parts are text parts; empty text parts are dropped; so `"hi"` equals
  `[{"type": "text", "text": "hi"}]`, and `null`, `""` and `[]` are all equal. Other parts
  (images, files) compare as their JSON with None values dropped.
- Tool calls compare by function name and arguments parsed as JSON (arguments that are not JSON
  compare as their raw string); tool-call ids are ignored, since the chat template does not render
  them and frameworks may rewrite them.

A conversation is hashed as a chain: `h_0 = H(context)`, `h_i = H(h_{i-1} || canon(m_i))`, so the
hash of every prefix comes out of one pass over the messages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

__all__ = [
    "ROOT_HASH",
    "canonical_message",
    "chain_hashes",
    "context_hash",
    "extend_chain",
    "extend_chain_canonical",
    "tools_context",
]

_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
_DIGEST_SIZE = 16

ROOT_HASH = b"\x00" * _DIGEST_SIZE


def _drop_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_drop_none(v) for v in value]
    return value


def _canonical_content(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content] if content else []
    if isinstance(content, Mapping):
        content = [content]
    parts: list[Any] = []
    for part in content:
        if isinstance(part, str):
            text: Any = part
        elif isinstance(part, Mapping) and part.get("type", "text") in _TEXT_PART_TYPES:
            text = part.get("text")
        else:
            parts.append(_drop_none(part))
            continue
        if text:
            parts.append(text)
    return parts


def _canonical_arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
    return _drop_none(arguments)


def _canonical_tool_call(call: Mapping[str, Any]) -> list[Any]:
    function = call.get("function")
    if not isinstance(function, Mapping):
        function = call
    return [function.get("name"), _canonical_arguments(function.get("arguments"))]


def canonical_message(message: Mapping[str, Any]) -> bytes:
    """The canonical serialisation of one message (see the module docstring for the rules)."""
    role = message.get("role")
    if role == "developer":
        role = "system"
    tool_calls = message.get("tool_calls") or []
    canon = [
        role,
        None if role == "assistant" else message.get("name"),
        _canonical_content(message.get("content")),
        [_canonical_tool_call(call) for call in tool_calls],
    ]
    # OPT_SORT_KEYS makes dict argument order irrelevant; non-str dict keys cannot come from JSON.
    options = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
    try:
        return orjson.dumps(canon, option=options)
    except orjson.JSONEncodeError:
        # Arguments nested deeper than orjson writes (~254 levels) compare as their raw text.
        canon[3] = [_raw_tool_call(call) for call in tool_calls]
        return orjson.dumps(canon, option=options)


def _raw_tool_call(call: Mapping[str, Any]) -> list[Any]:
    function = call.get("function")
    if not isinstance(function, Mapping):
        function = call
    arguments = function.get("arguments")
    return [function.get("name"), arguments if isinstance(arguments, str) else repr(arguments)]


def _step(previous: bytes, canonical: bytes) -> bytes:
    h = hashlib.blake2b(previous, digest_size=_DIGEST_SIZE)
    h.update(canonical)
    return h.digest()


def context_hash(context: bytes | None) -> bytes:
    """The chain's root for a context (e.g. the tool set) that must also match; None: none."""
    if not context:
        return ROOT_HASH
    return hashlib.blake2b(context, digest_size=_DIGEST_SIZE).digest()


def tools_context(tools: Sequence[Mapping[str, Any]] | None) -> bytes | None:
    """The context bytes of a tool set: calls with other tools render other prompts."""
    if not tools:
        return None
    return orjson.dumps(_drop_none(list(tools)), option=orjson.OPT_SORT_KEYS)


def chain_hashes(messages: Sequence[Mapping[str, Any]], root: bytes = ROOT_HASH) -> list[bytes]:
    """Hashes of every non-empty prefix: element i is the hash of `messages[: i + 1]`."""
    return extend_chain(root, messages)


def extend_chain(previous: bytes, messages: Iterable[Mapping[str, Any]]) -> list[bytes]:
    """Continue a hash chain ending in `previous` over more messages."""
    return extend_chain_canonical(previous, (canonical_message(m) for m in messages))


def extend_chain_canonical(previous: bytes, canonicals: Iterable[bytes]) -> list[bytes]:
    """`extend_chain` over messages already in canonical form (`canonical_message`)."""
    hashes: list[bytes] = []
    for canonical in canonicals:
        previous = _step(previous, canonical)
        hashes.append(previous)
    return hashes
