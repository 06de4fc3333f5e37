"""The LoRA adapters a `VLLMEngine` serves through vLLM's runtime LoRA API, one line of versions
per policy.

A server started with `--enable-lora --max-lora-rank N` (N at least every adapter's rank) and
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` in its environment loads an adapter folder at run time
(`POST /v1/load_lora_adapter`) under a name, which a request then gives as its `model`. Each
version of each policy's adapter loads under a name of its own: `rltap-lora-<engine id>-v<N>`
for a single-policy run's adapter (`policy` None), `rltap-lora-<engine id>-<policy>-v<N>` for a
named policy's. The weights a request generates with are fixed when vLLM admits it, so a new
name per version (not `load_inplace`, which swaps an adapter under the requests using it) lets
the requests in flight finish on the old adapter, no pause needed. A policy's adapter two
versions back is unloaded (`POST /v1/unload_lora_adapter`); the one before stays for requests
sent just before the switch. The other policies' adapters are not touched.

A batch mixes at most `--max-loras` adapters (vLLM's default 1: requests of other adapters wait
for the next batch), and vLLM keeps at most `--max-cpu-loras` loaded ones in memory (it reads
an evicted one from its folder again): `rltap.engines.launch.vllm_command` starts a server
with several policies with room for each policy's adapter in a batch and two versions of each
in memory.
"""

from __future__ import annotations

import logging
import secrets
from collections import deque
from pathlib import Path
from typing import Any

from rltap.engines._http_client import EngineHTTPClient
from rltap.engines._http_errors import error_for_status
from rltap.engines.base import DEFAULT_POLICY
from rltap.record.errors import EngineError

__all__ = ["ADAPTERS_KEPT", "ServedAdapters", "named_policy"]

_LORA_SERVER = (
    "start the server with --enable-lora --max-lora-rank N (N at least the adapter's rank) "
    "and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment"
)
# Adapters kept loaded per policy: the one served and the one before it (requests sent just
# before a switch may still name it).
ADAPTERS_KEPT = 2

logger = logging.getLogger(__name__)


def named_policy(policy: str | None) -> str | None:
    """`policy` as `ServedAdapters` keys it: None for a single-policy run's (`DEFAULT_POLICY`)."""
    return None if policy is None or policy == DEFAULT_POLICY else policy


class ServedAdapters:
    """The adapters one engine loaded into its server: per policy (None: a single-policy run's
    adapter) the served adapter's name and version, and the names still loaded."""

    def __init__(self) -> None:
        self.prefix = f"rltap-lora-{secrets.token_hex(4)}"
        self._served: dict[str | None, tuple[str, int]] = {}
        self._loaded: dict[str | None, deque[str]] = {}

    def served(self, policy: str | None) -> tuple[str, int] | None:
        """The name requests of `policy` give as their model and its version; None before its
        first adapter loaded."""
        return self._served.get(policy)

    def name(self, policy: str | None, version: int) -> str:
        """The name `policy`'s adapter of `version` is served under (module docstring)."""
        if policy is None:
            return f"{self.prefix}-v{version}"
        return f"{self.prefix}-{policy}-v{version}"

    async def load(
        self, client: EngineHTTPClient, folder: Path, version: int, policy: str | None
    ) -> str:
        """Load `policy`'s adapter in `folder` as its `version`, served from now on; unload
        that policy's adapter two versions back. Returns the name it is served under."""
        name = self.name(policy, version)
        await _lora_call(client, "/v1/load_lora_adapter", name, {"lora_path": str(folder)})
        self._served[policy] = (name, version)
        loaded = self._loaded.setdefault(policy, deque())
        loaded.append(name)
        while len(loaded) > ADAPTERS_KEPT:
            old = loaded.popleft()
            try:
                await _lora_call(client, "/v1/unload_lora_adapter", old, {})
            except EngineError as exc:  # the new adapter serves: a leftover one costs memory
                logger.warning("vLLM did not unload the LoRA adapter %s: %s", old, exc.message)
        return name


async def _lora_call(client: EngineHTTPClient, path: str, name: str, body: dict[str, Any]) -> None:
    """One call of vLLM's runtime LoRA API; its errors say how the server must be started."""
    reply = await client.request("POST", path, {"lora_name": name, **body})
    if reply.status == 404 and path.startswith("/v1/load"):
        msg = f"vLLM at {client.base_url} has no {path} route: {_LORA_SERVER}"
        raise EngineError(msg)
    if reply.status >= 400:
        error = error_for_status(client.engine, reply.status, reply.payload)
        msg = f"{error.message} (LoRA adapter {name}; {_LORA_SERVER})"
        raise EngineError(msg, is_retryable=error.is_retryable) from error
