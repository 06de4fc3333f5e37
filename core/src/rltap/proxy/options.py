"""The flags shared by `rltap serve`, `rltap rollout` and `rltap demo` (cheap to import)."""

from __future__ import annotations

import argparse

from rltap.chat.renderer import RenderMode
from rltap.engines.factory import ENGINE_KINDS
from rltap.record.tensor_codec import TENSOR_ENVELOPES

__all__ = ["add_serve_arguments"]


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `rltap serve` (also used by `rltap rollout` and `rltap demo`)."""
    engine = parser.add_argument_group("engine")
    engine.add_argument(
        "--engine",
        choices=ENGINE_KINDS,
        default="transformers",
        help="transformers: embedded (default); vllm, sglang: a server at --url; scripted: "
        "replies from --script, logprobs from --model",
    )
    engine.add_argument("--model", help="model folder (transformers, scripted) or served name")
    engine.add_argument("--tokenizer", help="tokenizer folder (default: --model)")
    engine.add_argument("--url", help="engine server address (vllm, sglang)")
    engine.add_argument("--script", help="module:function replying for the scripted engine")
    engine.add_argument("--num-threads", type=int, default=1, help="torch threads (default 1)")
    chat = parser.add_argument_group("chat")
    chat.add_argument(
        "--chat-template-mode",
        choices=[m.value for m in RenderMode],
        default="concat",
        help="concat: a call continuing a parent reuses its exact tokens (default); hf: render "
        "the whole conversation every call",
    )
    chat.add_argument("--tool-parser", default="hermes", help="tool-call parser (default hermes)")
    chat.add_argument("--reasoning-parser", default=None, help="e.g. qwen3 (default: none)")
    chat.add_argument("--max-context", type=int, default=None, help="default: the model's")
    chat.add_argument(
        "--default-max-tokens", type=int, default=4096, help="when a request sets none"
    )
    chat.add_argument(
        "--strict-max-tokens",
        action="store_true",
        help="refuse (400) a max_tokens beyond the context left instead of cutting it to fit",
    )
    chat.add_argument(
        "--drop-unsupported-content",
        action="store_true",
        help="drop image, audio and file parts the model cannot read instead of refusing (400)",
    )
    limits = parser.add_argument_group("sessions")
    limits.add_argument("--capacity", type=int, default=1024, help="sessions at once")
    limits.add_argument("--session-ttl", type=float, default=1800.0, help="idle seconds")
    limits.add_argument("--export-grace", type=float, default=900.0, help="seconds after end")
    limits.add_argument(
        "--max-body-bytes", type=int, default=32 * 1024 * 1024, help="larger bodies get 413"
    )
    limits.add_argument("--model-name", default=None, help="name in /v1/models")
    limits.add_argument(
        "--export-format",
        choices=TENSOR_ENVELOPES,
        default="rltap",
        help="the /export_trajectories body when a request names no format: rltap (default) "
        "or areal (AReaL 1.0.4's, which its OpenAIProxyClient reads)",
    )
    _add_store_arguments(parser)


def _add_store_arguments(parser: argparse.ArgumentParser) -> None:
    store = parser.add_argument_group("capture store")
    store.add_argument(
        "--store", default=None, metavar="PATH",
        help="keep sessions, finished calls and rewards in this SQLite file (created if "
        "missing); a proxy started again on it exports what the last one recorded",
    )  # fmt: skip
    store.add_argument(
        "--store-retention", default=None, metavar="AGE|COUNT",
        help="prune exported sessions from --store after an age (7d, 12h, 30m) or beyond a "
        "count (the newest 1000 kept); default: keep all",
    )  # fmt: skip
