"""Several LoRA adapters over one base model in an embedded engine: which adapter each row of a
forward runs with.

peft's LoRA layers take `adapter_names`, one name per row of their input (`BASE_ROW` for the
base model alone), and then add to each row its own adapter only: peft's mixed-batch inference
(`PeftModel.forward(..., adapter_names=[...])`), which passes the names to every LoRA layer with
a forward pre-hook for the duration of one call. The engine's model stays the plain Hugging Face
model with its adapters injected (`peft.inject_adapter_in_model`, adapter named after its
policy), so its class, forward and KV cache are unchanged: `AdapterRouter` hooks each LoRA
layer the same way, once (the first forward that routes, and again after an adapter adds
layers), and `route(names)` sets the names around one forward. A forward with no names is
peft's plain one (the active adapter on every row): the engine routes only when its rows need
something else, so a single-policy run (one adapter, `DEFAULT_POLICY`) runs exactly as before,
without a hook.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from rltap._lazy import require_module
from rltap.engines.base import DEFAULT_POLICY
from rltap.engines.lora import LORA_EXTRA

__all__ = ["BASE_ROW", "AdapterRouter"]

# peft's name for a row that runs on the base model alone.
BASE_ROW = "__base__"


class AdapterRouter:
    """The adapters injected into one engine's model, and the hooks that hand each LoRA layer
    the adapter of each row.

    Usage:
        router = AdapterRouter()
        load_adapter(model, adapter); router.add(model, adapter.name)  # on the worker thread
        with router.route(router.rows_for([slot.request.policy for slot in rows])):
            model(**inputs)
    """

    def __init__(self) -> None:
        self.adapters: set[str] = set()
        self._names: list[str] | None = None
        self._model: Any = None  # to hook before the next forward that routes
        self._hooked: set[int] = set()
        self._handles: list[Any] = []

    def add(self, model: Any, name: str) -> None:
        """Record that adapter `name` is injected into `model` (whose LoRA layers not hooked
        yet are hooked before the next forward that routes: a new adapter may add layers)."""
        self.adapters.add(name)
        self._model = model

    def _hook(self, model: Any) -> None:
        peft_lora = require_module("peft.tuners.lora", LORA_EXTRA, "serving LoRA adapters")
        for module in model.modules():
            if isinstance(module, peft_lora.LoraLayer) and id(module) not in self._hooked:
                self._hooked.add(id(module))
                handle = module.register_forward_pre_hook(self._pass_names, with_kwargs=True)
                self._handles.append(handle)

    def adapter_of(self, policy: str | None) -> str:
        """The adapter a request with `policy` generates with: its policy's (None:
        `DEFAULT_POLICY`'s), or `BASE_ROW` while the engine has no such adapter (a policy's
        adapter before its first update is the base model: a new LoRA adapter adds zero)."""
        name = DEFAULT_POLICY if policy is None else policy
        return name if name in self.adapters else BASE_ROW

    def changes(self, updated: str | None, policy: str | None) -> bool:
        """Whether an update of policy `updated` (None: the base weights) changes what a
        request with `policy` generates with: the base weights and a single-policy run's
        adapter change every request, a named policy's adapter only its own."""
        if updated is None or updated == DEFAULT_POLICY:
            return True
        return self.adapter_of(policy) == updated

    def rows_for(self, policies: Sequence[str | None]) -> list[str] | None:
        """The adapter of each row for `route`, or None where the plain forward (the active
        adapter, `DEFAULT_POLICY`, on every row; or no adapter at all) is what every row
        needs."""
        names = [self.adapter_of(policy) for policy in policies]
        plain = DEFAULT_POLICY if DEFAULT_POLICY in self.adapters else BASE_ROW
        if self.adapters <= {DEFAULT_POLICY} and all(name == plain for name in names):
            return None
        return names

    @contextlib.contextmanager
    def route(self, names: Sequence[str] | None) -> Iterator[None]:
        """Each LoRA layer runs row i with adapter `names[i]` inside (None: peft's plain
        forward). Only on the engine's worker thread: the names are the model's, not the
        thread's."""
        if names is not None and self._model is not None:
            self._hook(self._model)
            self._model = None
        self._names = None if names is None else list(names)
        try:
            yield
        finally:
            self._names = None

    def _pass_names(
        self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        if self._names is None:
            return None
        return args, {**kwargs, "adapter_names": self._names}
