"""What a session asks its engine for one call, under the session's chat settings.

`output_parser` builds (once per pair of names) the parsers a `ChatConfig` names;
`build_model_request` turns a call's canonical request and rendered prompt into the engine's
`ModelRequest`, bounded and defaulted by the session's `ChatConfig`.
"""

from __future__ import annotations

import functools
from typing import Any

from rltap.chat.constraints import request_constraint
from rltap.chat.reasoning import get_reasoning_parser
from rltap.chat.registry import UnknownNameError
from rltap.chat.renderer import ChatRenderer
from rltap.chat.streaming import OutputParser
from rltap.chat.tool_parsers import get_tool_parser
from rltap.config.flags import ConfigError
from rltap.config.serve import ChatConfig
from rltap.record.errors import ContextLengthExceeded
from rltap.record.generation import CanonicalRequest
from rltap.record.sampling import EpisodeSampling
from rltap.record.types import ModelRequest

__all__ = ["UnknownParser", "build_model_request", "output_parser"]


class UnknownParser(ConfigError, UnknownNameError):
    """--tool-parser or --reasoning-parser names no registered parser; the message lists the
    known ones. A `LookupError` too, as the registry's own error (and AReaL's) is."""


def output_parser(chat: ChatConfig) -> OutputParser:
    """The parsers `chat` names (--tool-parser, --reasoning-parser); `UnknownParser` naming
    the flag of an unknown one. Built once per pair of names: a proxy's sessions share it."""
    return _output_parser(chat.tool_parser, chat.reasoning_parser)


@functools.cache
def _output_parser(tool_parser: str | None, reasoning_parser: str | None) -> OutputParser:
    try:
        tools = None if tool_parser is None else get_tool_parser(tool_parser)
    except UnknownNameError as exc:
        raise UnknownParser(f"--tool-parser: {exc}") from None
    try:
        thoughts = None if reasoning_parser is None else get_reasoning_parser(reasoning_parser)
    except UnknownNameError as exc:
        raise UnknownParser(f"--reasoning-parser: {exc}") from None
    return OutputParser(tools, thoughts)


def build_model_request(
    chat: ChatConfig,
    parser: OutputParser,
    renderer: ChatRenderer,
    request: CanonicalRequest,
    messages: list[dict[str, Any]],
    ids: list[int],
    index: int,
    *,
    sampling: EpisodeSampling,
    call: int,
    session_id: str | None = None,
    policy: str | None = None,
) -> ModelRequest:
    """Choice `index` of `request`, its prompt rendered as `ids`, as the engine's request: the
    output bounded by the context left, `chat`'s defaults, a seed per choice, the grammar of a
    schema or forced tool call (for the replies `parser` reads). `call` numbers the session's
    calls: with the episode's `sampling`, it gives a call without a seed of its own one (a
    rerun samples the same). `session_id`: the session the call belongs to; `policy`: the
    policy (LoRA adapter) that generates it."""
    context = chat.context_window
    limit = context - len(ids)
    if request.max_tokens is None:
        max_new = min(chat.default_max_tokens, limit)
    elif chat.strict_max_tokens:
        max_new = request.max_tokens
    else:
        max_new = min(request.max_tokens, limit)
    if max_new < 1 or max_new > limit:
        msg = (
            f"this model's maximum context length is {context} tokens; the "
            f"prompt has {len(ids)} tokens and {max_new if max_new > 0 else 1} more were "
            "requested"
        )
        raise ContextLengthExceeded(msg, param="messages")
    seed = sampling.call_seed(call, None if request.seed is None else request.seed + index)
    temperature = sampling.call_temperature(request.temperature)
    return ModelRequest(
        input_ids=ids,
        max_new_tokens=max_new,
        temperature=chat.default_temperature if temperature is None else temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=request.top_k or 0,
        stop_token_ids=list(renderer.stop_token_ids),
        stop=list(request.stop),
        seed=seed,
        messages=messages,
        tools=request.tools,
        constraint=request_constraint(request, parser, renderer),
        session_id=session_id,
        policy=policy,
    )
