"""What the episodes generate with: the policy TRL trains, in this process or on its vLLM server.

    use_vllm=False (TRL's default)      rltap's embedded engine on the trainer's own model (no
                                        copy), rendering with the trainer's tokenizer; each
                                        rollout stamps the version (global_step) and rebuilds
                                        the KV cache of anything in flight, as `rltap train`'s
                                        shared engine does (`rltap.train.shared`)
    use_vllm=True, vllm_mode="server"   rltap's vLLM engine on the server TRL syncs its weights
                                        into before each rollout (`trl vllm-serve` runs vLLM's
                                        own OpenAI server with processed logprobs)
    use_vllm=True, vllm_mode="colocate" refused: TRL's in-process vLLM has no HTTP server
    a sharded model (FSDP, ZeRO-3)      refused: each rank holds only part of the weights

The tokenizer rltap renders with must be the trainer's (`rltap.chat.check_same_tokenizer`): the
one saved with the model (its folder), or `tokenizer` given; on a vLLM server its `/tokenize`
route is asked to tokenize a probe text, where the server has one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from rltap.chat import check_same_tokenizer
from rltap.chat.renderer import ChatRenderer
from rltap.chat.tokenizer_match import TokenizerMismatch
from rltap.config.serve import ChatConfig
from rltap.engines.base import InferenceEngine
from rltap.engines.transformers import TransformersEngine
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import RltapError
from rltap.record.types import LogprobConvention
from rltap.train.shared import SharedModelSync, generating_module

__all__ = ["Generation", "UnsupportedTrainer", "check_trainer", "in_process", "on_vllm_server"]

logger = logging.getLogger("rltap_trl")

# What the vLLM server is asked to tokenize: special tokens of a chat turn, words, digits, accents.
_PROBE = "<|im_start|>user\nWhat is 12 * (3 + 4)? Réponds: naïve café 🌍<|im_end|>\n"


class UnsupportedTrainer(RltapError):
    """A GRPOTrainer set up in a way rltap cannot generate for; the message names the fix."""


@dataclass(slots=True)
class Generation:
    """An engine with its renderer, and how a rollout stamps the trainer's step on it."""

    engine: InferenceEngine
    renderer: ChatRenderer
    stamp: Callable[[int], Awaitable[None]]
    module: torch.nn.Module | None = None  # the trainer's model, when the engine runs it


def trainer_tokenizer(trainer: Any) -> Any:
    """The tokenizer TRL tokenizes and trains with (a processor's own tokenizer)."""
    processing_class = trainer.processing_class
    return getattr(processing_class, "tokenizer", None) or processing_class


def check_trainer(trainer: Any) -> None:
    """Refuse what rltap cannot generate for: colocated vLLM, a model sharded in process."""
    args = trainer.args
    if args.use_vllm:
        if args.vllm_mode != "server":
            msg = (
                f"use_vllm with vllm_mode={args.vllm_mode!r}: TRL's colocated vLLM runs inside "
                "the trainer with no HTTP server rltap's proxy could reach. Use "
                'vllm_mode="server" (start `trl vllm-serve --model ...`), or use_vllm=False to '
                "generate with the trainer's own model in process"
            )
            raise UnsupportedTrainer(msg)
        return
    sharding = _sharding(trainer)
    if sharding is not None:
        msg = (
            f"the trainer's model is sharded ({sharding}): each rank holds part of the weights, "
            "so rltap's in-process engine cannot generate with it. Generate on a vLLM server "
            '(use_vllm=True, vllm_mode="server"), or train without sharding (DDP)'
        )
        raise UnsupportedTrainer(msg)


def _sharding(trainer: Any) -> str | None:
    if getattr(trainer, "is_fsdp_enabled", False):
        return "FSDP"
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    if plugin is not None and getattr(plugin, "zero_stage", 0) == 3:
        return "DeepSpeed ZeRO-3"
    from torch.distributed.tensor import DTensor

    model = trainer.accelerator.unwrap_model(trainer.model)
    for parameter in model.parameters():
        if isinstance(parameter, DTensor):
            return "DTensor parameters: FSDP2 or tensor parallel"
        if hasattr(parameter, "ds_id"):
            return "DeepSpeed ZeRO-3"
    return None


def in_process(trainer: Any, chat: ChatConfig, tokenizer: Any) -> Generation:
    """The embedded engine on the trainer's model itself, rendering with `tokenizer` (None: the
    tokenizer saved with the model, else the trainer's), checked against the trainer's."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    rendering = tokenizer if tokenizer is not None else _saved_tokenizer(model)
    ours = trainer_tokenizer(trainer)
    rendering = ours if rendering is None else rendering
    check_same_tokenizer(ours, rendering, trainer_name="TRL")
    module = generating_module(model)
    engine = TransformersEngine(
        module,
        tokenizer=rendering,
        # Where the model is: the engine moves a loaded model to its device.
        device=next(model.parameters()).device,
        num_threads=None,  # the trainer's torch threads, untouched
        version=trainer.state.global_step,
    )

    sync = SharedModelSync(engine)  # the weights are the trainer's: a version and a fresh cache

    async def stamp(step: int) -> None:
        await sync.push(model, step)

    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return Generation(engine, _renderer(rendering, chat, eos), stamp, module)


def _saved_tokenizer(model: Any) -> Any:
    """The tokenizer in the model's folder, when it was loaded from a local one with a tokenizer."""
    folder = Path(str(getattr(model, "name_or_path", "") or ""))
    if not (folder.is_dir() and (folder / "tokenizer_config.json").is_file()):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


async def on_vllm_server(trainer: Any, chat: ChatConfig, tokenizer: Any) -> Generation:
    """rltap's vLLM engine on the server of the trainer's args, started and its tokenizer
    probed; rendering with `tokenizer` (None: the trainer's), checked against the trainer's."""
    args = trainer.args
    url = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
    ours = trainer_tokenizer(trainer)
    rendering = ours if tokenizer is None else tokenizer
    check_same_tokenizer(ours, rendering, trainer_name="TRL")
    # `trl vllm-serve` starts vLLM with --logprobs-mode processed_logprobs.
    engine = VLLMEngine(
        url, logprob_convention=LogprobConvention.PROCESSED, version=trainer.state.global_step
    )
    await engine.start()
    try:
        await _probe_tokenizer(url, str(engine.model), ours)
    except BaseException:
        await engine.close()
        raise

    async def stamp(step: int) -> None:
        engine.set_version(step)  # TRL synced the server's weights before calling rollout_func

    return Generation(engine, _renderer(rendering, chat, None), stamp)


async def _probe_tokenizer(url: str, model: str, tokenizer: Any) -> None:
    """Compare the server's ids for a probe text with the trainer's (vLLM's `/tokenize`)."""
    body = {"model": model, "prompt": _PROBE, "add_special_tokens": False}
    async with httpx.AsyncClient(timeout=30.0) as http:
        response = await http.post(f"{url.rstrip('/').removesuffix('/v1')}/tokenize", json=body)
    if response.status_code == 404:
        logger.warning("the vLLM server at %s has no /tokenize: its tokenizer is not checked", url)
        return
    response.raise_for_status()
    served = list(response.json()["tokens"])
    expected = list(tokenizer.encode(_PROBE, add_special_tokens=False))
    if served != expected:
        msg = (
            f"the vLLM server at {url} ({model}) tokenizes a probe text as {served[:12]}..., TRL's "
            f"tokenizer as {expected[:12]}...: serve the model TRL trains (its tokenizer), or "
            "the ids and logprobs rltap records mean other text to the trainer"
        )
        raise TokenizerMismatch(msg)


def _renderer(tokenizer: Any, chat: ChatConfig, eos: int | list[int] | None) -> ChatRenderer:
    stops = [eos] if isinstance(eos, int) else list(eos or [])
    return ChatRenderer(tokenizer, mode=chat.chat_template_mode, extra_stop_token_ids=stops)
