"""What a session asks its engine for one call, under the session's settings.

`SessionConfig` holds how a session renders, parses and bounds its calls; `build_model_request`
turns a call's canonical request and rendered prompt into the engine's `ModelRequest`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rltap.chat.constraints import request_constraint
from rltap.chat.renderer import ChatRenderer
from rltap.chat.streaming import OutputParser
from rltap.config.serve import FALLBACK_MAX_CONTEXT, ChatConfig
from rltap.record.errors import ContextLengthExceeded
from rltap.record.generation import CanonicalRequest
from rltap.record.sampling import EpisodeSampling
from rltap.record.types import ModelRequest

__all__ = ["SessionConfig", "build_model_request"]


@dataclass(slots=True, kw_only=True)
class SessionConfig:
    """How a session renders, parses and bounds its calls.

    Usage:
        SessionConfig(max_context=32768, default_max_tokens=1024, output_parser=parser)
    """

    max_context: int = FALLBACK_MAX_CONTEXT
    default_max_tokens: int = ChatConfig.default_max_tokens
    default_temperature: float = ChatConfig.default_temperature
    output_parser: OutputParser = field(default_factory=OutputParser)
    # A max_tokens beyond the context left is cut to what is left (the reply may end `length`);
    # strict: refused with a 400, as vLLM does.
    strict_max_tokens: bool = ChatConfig.strict_max_tokens
    # Content parts the model cannot take (images, audio, files) are a 400 naming them, or,
    # with this, dropped from the prompt.
    drop_unsupported_content: bool = ChatConfig.drop_unsupported_content


def build_model_request(
    config: SessionConfig,
    renderer: ChatRenderer,
    request: CanonicalRequest,
    messages: list[dict[str, Any]],
    ids: list[int],
    index: int,
    *,
    sampling: EpisodeSampling,
    call: int,
) -> ModelRequest:
    """Choice `index` of `request`, its prompt rendered as `ids`, as the engine's request: the
    output bounded by the context left, the session's defaults, a seed per choice, the grammar
    of a schema or forced tool call. `call` numbers the session's calls: with the episode's
    `sampling`, it gives a call without a seed of its own one (a rerun samples the same)."""
    limit = config.max_context - len(ids)
    if request.max_tokens is None:
        max_new = min(config.default_max_tokens, limit)
    elif config.strict_max_tokens:
        max_new = request.max_tokens
    else:
        max_new = min(request.max_tokens, limit)
    if max_new < 1 or max_new > limit:
        msg = (
            f"this model's maximum context length is {config.max_context} tokens; the "
            f"prompt has {len(ids)} tokens and {max_new if max_new > 0 else 1} more were "
            "requested"
        )
        raise ContextLengthExceeded(msg, param="messages")
    seed = sampling.call_seed(call, None if request.seed is None else request.seed + index)
    temperature = sampling.call_temperature(request.temperature)
    return ModelRequest(
        input_ids=ids,
        max_new_tokens=max_new,
        temperature=config.default_temperature if temperature is None else temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=request.top_k or 0,
        stop_token_ids=list(renderer.stop_token_ids),
        stop=list(request.stop),
        seed=seed,
        messages=messages,
        tools=request.tools,
        constraint=request_constraint(request, config.output_parser, renderer),
    )
