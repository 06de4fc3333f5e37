"""`rltap serve`'s settings: the engine, the chat rendering and session defaults, the proxy's
session limits and its capture store (`ServeConfig`, shared by `rltap rollout`, `rltap train`,
`rltap demo` and every Ray rollout actor), and where `rltap serve` listens (`ServerConfig`).

`rltap.session.SessionConfig`, `rltap.client.DirectOpenAI` and `rltap.proxy.ProxyLimits` take
their defaults from these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, TypeAlias

from rltap.config.engines import ENGINE_KINDS, SERVER_ENGINES, engines_help
from rltap.config.flags import option, section
from rltap.record.tensor_codec import TensorEnvelope

__all__ = [
    "ENGINE_KINDS",
    "FALLBACK_MAX_CONTEXT",
    "MAX_PREFILL_TOKENS",
    "SERVER_ENGINES",
    "ChatConfig",
    "ChatTemplateMode",
    "EngineConfig",
    "EngineKind",
    "LimitsConfig",
    "ServeConfig",
    "ServerConfig",
    "StoreConfig",
]

# `--engine`'s choices: the names in `rltap.config.engines.ENGINES` (to mypy, any str).
if TYPE_CHECKING:
    EngineKind: TypeAlias = str
else:
    EngineKind = Literal[ENGINE_KINDS]
# `rltap.chat.renderer.RenderMode`'s values (tests/config checks they agree).
ChatTemplateMode = Literal["hf", "concat"]
# The context when neither --max-context, the engine nor the model's config.json says one.
FALLBACK_MAX_CONTEXT = 32768
# The embedded engine's budget for one batched prefill forward, padding included: it bounds the
# forward's activations (Qwen2.5-0.5B's MLP intermediates at 8192 tokens: ~0.5 GB in fp32).
MAX_PREFILL_TOKENS = 8192


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """Which engine generates, and from what model."""

    engine: EngineKind = option("transformers", engines_help())
    model: str | None = option(None, "model folder (transformers, scripted) or served name")
    tokenizer: str | None = option(None, "tokenizer folder (default: --model)")
    url: str | None = option(None, "engine server address (vllm, sglang)")
    script: str | None = option(None, "module:function replying for the scripted engine")
    num_threads: int = option(1, "torch threads (default 1)")
    device: str = option(
        "cpu", "torch device of the embedded engine (default cpu; a Ray actor given GPUs: cuda)"
    )
    max_prefill_tokens: int = option(
        MAX_PREFILL_TOKENS,
        f"embedded engine: most tokens (padding included) prefilled in one forward; requests "
        f"arriving together share one while they fit (default {MAX_PREFILL_TOKENS})",
    )


@dataclass(frozen=True, kw_only=True)
class ChatConfig:
    """How each call is rendered, parsed and bounded: a session's defaults."""

    chat_template_mode: ChatTemplateMode = option(
        "concat",
        "concat: a call continuing a parent reuses its exact tokens (default); hf: render "
        "the whole conversation every call",
    )
    tool_parser: str | None = option("hermes", "tool-call parser (default hermes)")
    reasoning_parser: str | None = option(None, "e.g. qwen3 (default: none)")
    max_context: int | None = option(None, "default: the model's")
    default_max_tokens: int = option(4096, "when a request sets none")
    default_temperature: float = option(1.0, "when a request sets none")
    strict_max_tokens: bool = option(
        False, "refuse (400) a max_tokens beyond the context left instead of cutting it to fit"
    )
    drop_unsupported_content: bool = option(
        False, "drop image, audio and file parts the model cannot read instead of refusing (400)"
    )


@dataclass(frozen=True, kw_only=True)
class LimitsConfig:
    """The proxy's sessions: how many, how long, and its bodies."""

    capacity: int = option(1024, "sessions at once")
    session_ttl: float = option(1800.0, "idle seconds")
    export_grace: float = option(900.0, "seconds after end")
    max_body_bytes: int = option(32 * 1024 * 1024, "larger bodies get 413")
    model_name: str | None = option(None, "name in /v1/models")
    export_format: TensorEnvelope = option(
        "rltap",
        "the /export_trajectories body when a request names no format: rltap (default) "
        "or areal (AReaL 1.0.4's, which its OpenAIProxyClient reads)",
    )


@dataclass(frozen=True, kw_only=True)
class StoreConfig:
    """The durable capture store (none: memory only)."""

    store: str | None = option(
        None,
        "keep sessions, finished calls and rewards in this SQLite file (created if "
        "missing); a proxy started again on it exports what the last one recorded",
        metavar="PATH",
    )
    store_retention: str | None = option(
        None,
        "prune exported sessions from --store after an age (7d, 12h, 30m) or beyond a "
        "count (the newest 1000 kept); default: keep all",
        metavar="AGE|COUNT",
    )


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """Everything a proxy in front of an engine is built from (`rltap.proxy.serve_config`)."""

    engine: EngineConfig = section(EngineConfig, "engine")
    chat: ChatConfig = section(ChatConfig, "chat")
    limits: LimitsConfig = section(LimitsConfig, "sessions")
    store: StoreConfig = section(StoreConfig, "capture store")

    def with_store(self, path: str) -> ServeConfig:
        """These settings with the capture store in `path`."""
        return replace(self, store=replace(self.store, store=path))

    def with_engine(self, *, url: str | None = None, device: str | None = None) -> ServeConfig:
        """These settings with the engine's `url` or `device` changed (those given)."""
        engine = self.engine
        if url is not None:
            engine = replace(engine, url=url)
        if device is not None:
            engine = replace(engine, device=device)
        return replace(self, engine=engine)


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """`rltap serve`: the proxy's settings and where it listens."""

    host: str = option("127.0.0.1", "bind address (default 127.0.0.1)")
    port: int = option(8000, "port (default 8000)")
    admin_key: str | None = option(None, "admin key (default: RLTAP_ADMIN_KEY)")
    serve: ServeConfig = section(ServeConfig)
