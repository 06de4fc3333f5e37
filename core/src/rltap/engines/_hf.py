"""Loading a Hugging Face causal LM and running it on one dedicated worker thread.

Both embedded engines (transformers, scripted) hold their model in a `ModelHost`: every torch call
goes through `ModelHost.run`, so model work is serialised on one thread and the event loop (which
also serves the proxy) never blocks on a forward pass.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import torch

from rltap._lazy import require_module
from rltap.engines.base import (
    DEFAULT_POLICY,
    AdapterWeights,
    NamedTensors,
    WeightFolder,
    WeightSource,
)
from rltap.engines.lora import LORA_EXTRA, LORA_TENSOR, adapter_of_tensor
from rltap.record.errors import EngineError, InvalidRequest

__all__ = [
    "ModelHost",
    "ModelSource",
    "TokenizerSource",
    "adapter_names",
    "cache_kwarg",
    "context_limit",
    "default_eos_ids",
    "load_adapter",
    "load_weights",
    "read_weight_folder",
    "resolve_dtype",
    "state_of",
    "teacher_forced_logprobs",
    "weight_loader",
]

T = TypeVar("T")

# A folder with a Hugging Face checkpoint, or a model object already loaded by the caller
# (a trainer colocating the engine, or tests sharing one model between engines).
ModelSource = str | Path | Any
TokenizerSource = str | Path | Any | None


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """`torch.float32` or its name (`"float32"`, `"bfloat16"`, ...) as a `torch.dtype`."""
    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, dtype, None)
    if not isinstance(resolved, torch.dtype):
        msg = f"unknown dtype {dtype!r}"
        raise ValueError(msg)
    return resolved


def _set_threads(num_threads: int | None) -> None:
    if num_threads is not None:
        torch.set_num_threads(num_threads)


def _load_model(
    source: ModelSource, device: torch.device, dtype: torch.dtype, attn_implementation: str | None
) -> Any:
    if not isinstance(source, str | Path):
        loaded: Any = source
        return loaded.to(device).eval()
    import transformers

    kwargs: dict[str, Any] = {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    # transformers renamed `torch_dtype` to `dtype` in 4.56.
    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    kwargs["dtype" if (major, minor) >= (4, 56) else "torch_dtype"] = dtype
    try:
        model: Any = transformers.AutoModelForCausalLM.from_pretrained(str(source), **kwargs)
    except (OSError, ValueError) as exc:
        msg = f"cannot load a causal LM from {source}: {exc}"
        raise EngineError(msg) from exc
    return model.to(device).eval()


def _load_tokenizer(source: TokenizerSource, fallback: ModelSource, required: bool) -> Any:
    if source is not None and not isinstance(source, str | Path):
        return source
    path = source if source is not None else fallback
    if not isinstance(path, str | Path):
        path = getattr(getattr(fallback, "config", None), "name_or_path", None) or None
    if path is None:
        if required:
            msg = "a tokenizer is required: pass tokenizer= (a folder or a loaded tokenizer)"
            raise EngineError(msg)
        return None
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as exc:
        if not required and source is None:
            return None
        msg = f"cannot load a tokenizer from {path}: {exc}"
        raise EngineError(msg) from exc


class ModelHost:
    """A causal LM, its tokenizer and the single worker thread that runs them.

    Usage:
        host = ModelHost("/models/tiny", device="cpu", dtype="float32", num_threads=1)
        await host.start()
        logits = await host.run(lambda: host.model(input_ids=ids).logits)
    """

    def __init__(
        self,
        model: ModelSource,
        *,
        tokenizer: TokenizerSource = None,
        tokenizer_required: bool = False,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | str = torch.float32,
        num_threads: int | None = 1,
        attn_implementation: str | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.dtype = resolve_dtype(dtype)
        self.num_threads = num_threads
        self._model_source = model
        self._tokenizer_source = tokenizer
        self._tokenizer_required = tokenizer_required
        self._attn_implementation = attn_implementation
        self._executor: ThreadPoolExecutor | None = None
        self._starting: asyncio.Future[None] | None = None
        self.model: Any = None
        self.tokenizer: Any = None

    @property
    def started(self) -> bool:
        return self._executor is not None and self.model is not None

    async def start(self) -> None:
        """Start the worker thread and load the model and tokenizer on it (once).

        Concurrent callers share one start; a failed start is retried by the next call.
        """
        if self.started:
            return
        if self._starting is None or self._starting.done():
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix="rltap-engine",
                initializer=_set_threads,
                initargs=(self.num_threads,),
            )
        # The process-wide intra-op pool size; the worker's initializer covers OpenMP's
        # per-thread setting.
        _set_threads(self.num_threads)
        if self.model is None:
            self.model, self.tokenizer = await self.run(self._load)

    def _load(self) -> tuple[Any, Any]:
        model = _load_model(self._model_source, self.device, self.dtype, self._attn_implementation)
        tokenizer = _load_tokenizer(
            self._tokenizer_source, self._model_source, self._tokenizer_required
        )
        return model, tokenizer

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` on the worker thread under `torch.inference_mode`."""
        if self._executor is None:
            msg = "engine is not started"
            raise EngineError(msg)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(_no_grad, fn, *args, **kwargs)
        )

    async def close(self) -> None:
        """Stop the worker thread after the call in progress (the model stays loaded)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, executor.shutdown, True)


def _no_grad(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    with torch.inference_mode():
        return fn(*args, **kwargs)


def cache_kwarg(model: Any) -> str:
    """The forward() keyword of the KV cache: `cache` (transformers 5) or `past_key_values`."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def context_limit(model: Any, override: int | None) -> int:
    """Most tokens (prompt + output) a sequence may hold."""
    if override is not None:
        return override
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    limit = getattr(text_config, "max_position_embeddings", None)
    return int(limit) if limit else 1 << 31


def default_eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """End-of-sequence ids from the generation config, the model config and the tokenizer."""
    found: list[int] = []
    sources: Sequence[Any] = (
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
        getattr(model.config, "eos_token_id", None),
        getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None,
    )
    for value in sources:
        for token_id in value if isinstance(value, list | tuple) else [value]:
            if isinstance(token_id, int) and token_id not in found:
                found.append(token_id)
    return found


def teacher_forced_logprobs(
    model: Any, prompt_ids: Sequence[int], output_ids: Sequence[int], temperature: float = 1.0
) -> list[float]:
    """log_softmax(logits / T) of each output token given everything before it (one forward)."""
    if not output_ids:
        return []
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(output_ids)], device=device)
    n_out = len(output_ids)
    # Only the positions that predict an output token need the (vocabulary-sized) lm_head.
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=n_out + 1).logits[0, :-1]
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)
    target = ids[0, -n_out:]
    return [float(x) for x in logprobs.gather(1, target[:, None]).squeeze(1).tolist()]


def read_weight_folder(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the `*.safetensors` shards in `folder` (a `save_pretrained` output)."""
    from safetensors.torch import load_file

    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        msg = f"no *.safetensors shards in {folder}"
        raise EngineError(msg)
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(load_file(str(shard)))
    return state


async def state_of(source: WeightSource) -> Mapping[str, torch.Tensor]:
    """`source` as a state dict: itself, or its folder's shards (written first if it says how,
    read on a thread of their own, not the engine's worker), or its named tensors collected. A
    LoRA adapter is no state dict (`rltap.engines.lora.weight_loader` loads one)."""
    if isinstance(source, Mapping):
        return source
    if isinstance(source, NamedTensors):
        return dict(source.tensors())
    if isinstance(source, AdapterWeights):
        msg = "a LoRA adapter is not a whole state dict: load it with load_adapter"
        raise InvalidRequest(msg)
    return await asyncio.to_thread(read_weight_folder, await source.written())


def load_weights(model: Any, state: Mapping[str, torch.Tensor], *, partial: bool) -> None:
    """Copy `state` into `model`'s own tensors (in place: no second copy of the model).

    Unless `partial`, every weight of the model must be in `state`, or one aliasing it (tied
    weights, which `save_pretrained` writes once): one left out would silently keep its value.
    """
    own = model.state_dict()
    if not partial:
        given = {(own[name].data_ptr(), own[name].shape) for name in state if name in own}
        missing = sorted(
            name
            for name in own.keys() - state.keys()
            if (own[name].data_ptr(), own[name].shape) not in given
        )
        if missing:
            msg = (
                f"the new weights' source lacks {len(missing)} of the engine's {len(own)} "
                f"weights (first: {missing[:5]}); is the trainer model the same architecture, "
                "unwrapped? (partial=True updates a subset)"
            )
            raise EngineError(msg)
    unknown = sorted(state.keys() - own.keys())
    if unknown:
        msg = f"unknown weight names: {unknown[:5]}"
        raise EngineError(msg)
    try:
        model.load_state_dict(dict(state), strict=False)
    except RuntimeError as exc:  # a shape that differs from the engine's
        msg = f"cannot load weights: {exc}"
        raise EngineError(msg) from exc


def adapter_names(model: Any, adapter: str | None = None) -> set[str]:
    """The names of the adapter tensors injected into `model`, of adapter `adapter` only when
    given (peft names it after the `lora_*` part: `...q_proj.lora_A.<adapter>.weight`);
    empty: none."""
    names = {name for name in model.state_dict() if LORA_TENSOR in name}
    if adapter is None:
        return names
    return {name for name in names if adapter_of_tensor(name) == adapter}


def load_adapter(model: Any, adapter: AdapterWeights) -> None:
    """Copy `adapter` into `model` in place, injecting its layers first (as peft adapter
    `adapter.name`) if `model` has none of it (on the engine's worker thread). Every tensor
    of that adapter in the model must be given, and only those."""
    foreign = sorted(
        name for name in adapter.tensors if adapter_of_tensor(name) not in (None, adapter.name)
    )
    if foreign:
        msg = (
            f"adapter {adapter.name!r} holds tensors of another adapter name "
            f"(first: {foreign[:3]}): name its tensors after it, as peft does"
        )
        raise EngineError(msg)
    if adapter.name != DEFAULT_POLICY and getattr(adapter.config, "use_dora", False):
        msg = f"adapter {adapter.name!r} uses DoRA, which peft cannot mix with other adapters"
        raise EngineError(msg)
    own = adapter_names(model, adapter.name)
    if not own:
        peft = require_module("peft", LORA_EXTRA, "serving a LoRA adapter")
        # A copy: peft keeps the config object on the model and may amend it.
        config = copy.deepcopy(adapter.config)
        with warnings.catch_warnings():  # a second adapter is what the engine wants
            warnings.filterwarnings("ignore", "Already found a `peft_config`", UserWarning)
            peft.inject_adapter_in_model(config, model, adapter_name=adapter.name)
        own = adapter_names(model, adapter.name)
    missing = sorted(own - adapter.tensors.keys())
    if missing:
        msg = (
            f"the adapter lacks {len(missing)} of the engine's {len(own)} adapter tensors "
            f"(first: {missing[:3]}): was it trained with other target modules?"
        )
        raise EngineError(msg)
    load_weights(model, adapter.tensors, partial=True)


async def weight_loader(source: WeightSource, *, partial: bool) -> Callable[[Any], None]:
    """How an embedded engine loads `source` into its model (the function is called on its
    worker thread); a `WeightFolder`'s shards are read here first, off that thread. See
    `load_weights` for `partial`."""
    if isinstance(source, AdapterWeights):
        return lambda model: load_adapter(model, source)
    if isinstance(source, WeightFolder) and source.adapter:
        msg = (
            "an embedded engine takes a LoRA adapter as AdapterWeights (rltap.engines.base: "
            "its peft config and tensors), not as a saved adapter folder"
        )
        raise InvalidRequest(msg)
    state = await state_of(source)
    return lambda model: load_weights(model, state, partial=partial)
