"""`rltap serve`'s settings: the engine, the chat rendering and session defaults, the proxy's
session limits and its capture store (`ServeConfig`, shared by `rltap rollout`, `rltap train`,
`rltap demo` and every Ray rollout actor), and where `rltap serve` listens (`ServerConfig`).

The runtime classes take these sections themselves, so a setting is one field here: a
`rltap.session.Session` and `rltap.client.DirectOpenAI` take a `ChatConfig`, the proxy
(`rltap.proxy.create_app`) a whole `ServeConfig`. Each section checks its own values and raises
`ConfigError` naming the flag.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

from rltap.config.engines import ENGINE_KINDS, SERVER_ENGINES, engines_help
from rltap.config.flags import ConfigError, internal, option, section
from rltap.config.launch import LaunchConfig
from rltap.config.policies import Policies
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
    "LaunchConfig",
    "LimitsConfig",
    "Retention",
    "ServeConfig",
    "ServerConfig",
    "StoreConfig",
    "WeightTransfer",
    "check_admin_key",
    "parse_retention",
]

# `--engine`'s choices: the names in `rltap.config.engines.ENGINES` (to mypy, any str).
if TYPE_CHECKING:
    EngineKind: TypeAlias = str
else:
    EngineKind = Literal[ENGINE_KINDS]
# `rltap.chat.renderer.RenderMode`'s values (tests/config checks they agree).
ChatTemplateMode = Literal["hf", "concat"]
# How a weight sync reaches a vLLM server (`rltap.engines.vllm`).
WeightTransfer = Literal["folder", "nccl", "ipc"]
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
    url: str | None = option(
        None,
        "engine server address (vllm, sglang); several, comma-separated: the proxy routes "
        "sessions over them",
    )
    script: str | None = option(None, "module:function replying for the scripted engine")
    num_threads: int = option(1, "torch threads (default 1)")
    device: str = option(
        "cpu", "torch device of the embedded engine (default cpu; a Ray actor given GPUs: cuda)"
    )
    weight_transfer: WeightTransfer = option(
        "folder",
        "how a weight sync reaches a vLLM server: folder (saved, then reloaded from disk; "
        "default), nccl (vLLM's weight transfer to separate GPUs), ipc (CUDA IPC, trainer "
        "and server on one GPU)",
    )
    max_prefill_tokens: int = option(
        MAX_PREFILL_TOKENS,
        f"embedded engine: most tokens (padding included) prefilled in one forward; requests "
        f"arriving together share one while they fit (default {MAX_PREFILL_TOKENS})",
    )

    def __post_init__(self) -> None:
        _at_least(1, num_threads=self.num_threads, max_prefill_tokens=self.max_prefill_tokens)
        if self.weight_transfer not in get_args(WeightTransfer):
            choices = ", ".join(get_args(WeightTransfer))
            msg = f"--weight-transfer takes one of {choices}, got {self.weight_transfer!r}"
            raise ConfigError(msg)

    @property
    def tokenizer_dir(self) -> str:
        """--tokenizer, else --model: the folder the chat template is read from (a proxy needs
        one; `rltap rollout --proxy URL` runs no engine and so needs neither)."""
        folder = self.tokenizer or self.model
        if not folder:
            raise ConfigError("--tokenizer (or --model) must name a local tokenizer folder")
        return folder


@dataclass(frozen=True, kw_only=True)
class ChatConfig:
    """How each call is rendered, parsed and bounded: a session's defaults.

    Usage:
        ChatConfig(max_context=32768, default_max_tokens=1024, reasoning_parser="qwen3")
    """

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

    def __post_init__(self) -> None:
        if self.chat_template_mode not in get_args(ChatTemplateMode):
            modes = ", ".join(get_args(ChatTemplateMode))
            msg = f"--chat-template-mode takes one of {modes}, got {self.chat_template_mode!r}"
            raise ConfigError(msg)
        _at_least(1, default_max_tokens=self.default_max_tokens)
        if self.max_context is not None:
            _at_least(1, max_context=self.max_context)
        _at_least(0, default_temperature=self.default_temperature)

    @property
    def context_window(self) -> int:
        """--max-context, or `FALLBACK_MAX_CONTEXT` when neither it nor the model says one
        (the proxy fills it in from the model's config.json first)."""
        return self.max_context or FALLBACK_MAX_CONTEXT


@dataclass(frozen=True, kw_only=True)
class LimitsConfig:
    """The proxy's sessions: how many, how long, and its bodies."""

    capacity: int = option(1024, "sessions at once")
    session_ttl: float = option(1800.0, "idle seconds")
    export_grace: float = option(900.0, "seconds after end")
    grant_ttl: float = option(
        300.0, "seconds a slot reserved by /grant_capacity waits for its session (default 300)"
    )
    reap_interval: float = option(
        5.0, "seconds between the sweeps that end idle sessions and free expired ones"
    )
    max_body_bytes: int = option(32 * 1024 * 1024, "larger bodies get 413")
    model_name: str | None = option(None, "name in /v1/models")
    export_format: TensorEnvelope = option(
        "rltap",
        "the /export_trajectories body when a request names no format: rltap (default) "
        "or areal (AReaL 1.0.4's, which its OpenAIProxyClient reads)",
    )
    export_wait_timeout: float = option(
        30.0,
        "seconds /export_trajectories waits for a session's calls still running when the "
        "request sets no wait_timeout (default 30)",
    )
    max_export_wait: float = option(
        600.0, "the longest wait_timeout an /export_trajectories request may ask (default 600)"
    )

    def __post_init__(self) -> None:
        _at_least(1, capacity=self.capacity, max_body_bytes=self.max_body_bytes)
        _at_least(
            0,
            session_ttl=self.session_ttl,
            export_grace=self.export_grace,
            export_wait_timeout=self.export_wait_timeout,
        )
        if self.grant_ttl <= 0 or self.reap_interval <= 0:
            raise ConfigError("--grant-ttl and --reap-interval must be positive")
        if self.export_wait_timeout > self.max_export_wait:
            msg = (
                f"--export-wait-timeout ({self.export_wait_timeout:g}) must be at most "
                f"--max-export-wait ({self.max_export_wait:g})"
            )
            raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class Retention:
    """Keep exported sessions for `max_age` seconds, or the newest `max_count` of them."""

    max_age: float | None = None
    max_count: int | None = None


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_retention(text: str) -> Retention:
    """`Retention` from `--store-retention`'s text (`ConfigError` naming the forms it takes).

    `7d`, `12h`, `30m`, `90s`: exported sessions older than that are pruned; a bare number,
    `1000`: the newest 1000 exported sessions are kept."""
    spec = text.strip().lower()
    try:
        if spec and spec[-1] in _UNITS:
            age = float(spec[:-1]) * _UNITS[spec[-1]]
            if age > 0:
                return Retention(max_age=age)
        elif int(spec) >= 0:
            return Retention(max_count=int(spec))
    except ValueError:
        pass
    msg = f"--store-retention takes an age (7d, 12h, 30m, 90s) or a count (1000), got {text!r}"
    raise ConfigError(msg)


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

    def __post_init__(self) -> None:
        if self.store_retention is not None:
            if self.store is None:
                raise ConfigError("--store-retention needs --store")
            parse_retention(self.store_retention)

    @property
    def path(self) -> Path | None:
        """--store as a path; None: memory only."""
        return None if self.store is None else Path(self.store)

    @property
    def retention(self) -> Retention | None:
        """--store-retention, parsed; None: keep every session."""
        return None if self.store_retention is None else parse_retention(self.store_retention)


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    """Everything a proxy in front of an engine is built from (`rltap.proxy.create_app`)."""

    engine: EngineConfig = section(EngineConfig, "engine")
    chat: ChatConfig = section(ChatConfig, "chat")
    limits: LimitsConfig = section(LimitsConfig, "sessions")
    store: StoreConfig = section(StoreConfig, "capture store")
    launch: LaunchConfig = section(LaunchConfig, "managed engine servers")
    # The run's policies (`rltap train`'s, `TrainConfig.policies`): each call generates with
    # its agent's (`ModelRequest.policy`) and is recorded with it. None: one policy for all.
    policies: Policies | None = internal(
        None, "the policy of each agent (rltap train's [policies]); None: one for every call"
    )

    def __post_init__(self) -> None:
        if not self.launch.launch:
            return
        if self.engine.engine not in SERVER_ENGINES:
            msg = (
                f"--launch starts an engine server (--engine {' or '.join(SERVER_ENGINES)}); "
                f"the {self.engine.engine} engine runs in this process"
            )
            raise ConfigError(msg)
        if self.engine.url:
            raise ConfigError("--launch starts the engine's servers: give it no --url")
        if not self.engine.model:
            raise ConfigError("--launch needs --model: the model folder the servers load")

    @property
    def model_name(self) -> str:
        """The name /v1/models and /health answer: --model-name, else the model's (or the
        tokenizer's) folder name, else "rltap"."""
        if self.limits.model_name:
            return self.limits.model_name
        return Path(self.engine.model or self.engine.tokenizer or "rltap").name

    def with_policies(self, policies: Policies | None) -> ServeConfig:
        """These settings serving `policies` (each agent's calls with its policy's adapter)."""
        return self if policies == self.policies else replace(self, policies=policies)

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


# Keys anyone would guess; refused when the proxy listens beyond loopback.
_WEAK_KEYS = frozenset({"admin", "test", "secret", "password", "changeme", "rltap", "areal", "key"})
_MIN_PUBLIC_KEY_LEN = 16


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_admin_key(admin_key: str, host: str) -> None:
    """Refuse (`ConfigError`) an empty or guessable admin key on a non-loopback address."""
    if _is_loopback(host):
        return
    if not admin_key or admin_key.lower() in _WEAK_KEYS or len(admin_key) < _MIN_PUBLIC_KEY_LEN:
        msg = (
            f"refusing to listen on {host} with a known or short admin key; use at least "
            f"{_MIN_PUBLIC_KEY_LEN} random characters (--admin-key or RLTAP_ADMIN_KEY)"
        )
        raise ConfigError(msg)


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """`rltap serve`: the proxy's settings and where it listens."""

    host: str = option("127.0.0.1", "bind address (default 127.0.0.1)")
    port: int = option(8000, "port (default 8000)")
    admin_key: str | None = option(None, "admin key (default: RLTAP_ADMIN_KEY)")
    serve: ServeConfig = section(ServeConfig)

    def __post_init__(self) -> None:
        if self.admin_key is not None:  # an explicit "" is an empty key: refused
            check_admin_key(self.admin_key, self.host)


def _at_least(low: float, **values: float) -> None:
    """`ConfigError` naming the flag of the first value below `low`."""
    for name, value in values.items():
        if value < low:
            msg = f"--{name.replace('_', '-')} must be at least {low:g}, got {value:g}"
            raise ConfigError(msg)
