"""Weight sync: after an update, the engine generates with the trainer's weights and stamps the
new policy version on every token it hands out from then on.

`weight_sync(engine, folder)` picks the mechanism by engine type; each `push(model, version)`
returns once the engine runs the new weights:

- `TransformersEngine` (`EmbeddedSync`): the engine runs in this process, so the trainer's
  state dict is copied into the engine's model in place, no disk round trip
  (`TransformersEngine.update_weights`). The copy takes the engine's step lock: generation
  pauses after the decode step in progress, nothing is aborted. Requests in flight then
  continue with the new weights: their KV cache is recomputed (prompt and output so far are
  prefilled again with the new weights) and their tokens after the copy carry the new version,
  so one reply may hold tokens of two versions, each recorded as what produced it.
- `VLLMEngine` (`VLLMSync`): `model.save_pretrained(folder)` (safetensors), then vLLM's
  development API, which a server started with `VLLM_SERVER_DEV_MODE=1` exposes:
  `POST /pause?mode=wait`, `POST /collective_rpc` running the workers' `reload_weights` from
  the folder, `POST /reset_prefix_cache` (cached prefixes hold KV of the old weights),
  `POST /update_weight_version`, then `POST /resume`. `mode=wait` lets the requests in flight
  finish with the old weights (every one of their tokens is the old version, as stamped) and
  holds new ones until the resume: `abort` would throw rollouts away and `keep` would continue
  them on KV caches computed with the old weights. A long generation therefore delays the
  sync. rltap's version moves just before the resume, because the held requests start the
  moment vLLM resumes and their first tokens must carry the new version; the requests that
  finished under `wait` had been answered before `/pause` returned. If a step after the pause
  fails, vLLM stays paused (its weights may be half loaded) and the error says so.
- `SGLangEngine` (`SGLangSync`): `save_pretrained(folder)`, then SGLang's
  `POST /update_weights_from_disk` with `model_path` (and SGLang's own `weight_version`);
  SGLang waits for the requests in flight, loads the weights, flushes its prefix cache and
  answers `{"success", "message"}` (HTTP 400 when `success` is false). rltap's version moves
  once SGLang answered.

The disk-based syncs need `folder` readable by the server (same machine or a shared disk); it
is overwritten by each push. They talk to the server with a client of their own, not the
engine's, so a connection limit on the engine never holds a sync up behind generations that a
paused server does not answer.
"""

from __future__ import annotations

import asyncio
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import orjson

from rltap.engines._http_client import EngineHTTPClient
from rltap.engines._http_errors import error_for_status, map_http_errors
from rltap.engines.sglang import SGLangEngine
from rltap.engines.vllm import VLLMEngine
from rltap.record.errors import EngineError

if TYPE_CHECKING:
    import torch

    from rltap.engines._http import HTTPEngineBase
    from rltap.engines.base import InferenceEngine
    from rltap.engines.transformers import TransformersEngine

__all__ = [
    "DiskSync",
    "EmbeddedSync",
    "SGLangSync",
    "VLLMSync",
    "WeightSync",
    "save_weights",
    "weight_sync",
]

_DEV_MODE = "VLLM_SERVER_DEV_MODE=1"


class WeightSync(Protocol):
    """Moves a trainer's weights into an inference engine."""

    async def push(self, model: torch.nn.Module, version: int) -> None:
        """Make the engine generate with `model`'s weights; tokens generated afterwards carry
        `version`."""
        ...


def weight_sync(engine: InferenceEngine, folder: Path) -> WeightSync:
    """The weight sync for `engine`; `folder` is where a disk-based sync writes its shards."""
    if isinstance(engine, VLLMEngine):
        return VLLMSync(engine, folder)
    if isinstance(engine, SGLangEngine):
        return SGLangSync(engine, folder)
    # Without its module loaded no engine can be a TransformersEngine; importing it would
    # import torch.
    if "rltap.engines.transformers" in sys.modules:
        from rltap.engines.transformers import TransformersEngine

        if isinstance(engine, TransformersEngine):
            return EmbeddedSync(engine)
    msg = (
        f"no weight sync for {type(engine).__name__}; supported engines: TransformersEngine "
        "(in place), VLLMEngine (reload from disk, server started with "
        f"{_DEV_MODE}), SGLangEngine (update_weights_from_disk)"
    )
    raise TypeError(msg)


class EmbeddedSync:
    """Copies the trainer's weights into a `TransformersEngine` of this process, in place.

    Usage:
        sync = EmbeddedSync(engine)
        await sync.push(trainer_model, version=1)
    """

    def __init__(self, engine: TransformersEngine) -> None:
        self.engine = engine

    async def push(self, model: torch.nn.Module, version: int) -> None:
        """Copy `model`'s weights into the engine between two decode steps (see the module
        docstring for the requests in flight). Every weight of the engine's model must be in
        `model`'s state dict: one left out would silently keep its old value."""
        await self.push_state(model.state_dict(), version)

    async def push_state(self, state: dict[str, torch.Tensor], version: int) -> None:
        """`push` from a state dict (a Ray actor's engine gets the trainer's through the
        object store, `rltap.distributed`)."""
        await self.engine.start()
        missing = sorted(self.engine.model.state_dict().keys() - state.keys())
        if missing:
            msg = (
                f"the trainer model lacks {len(missing)} of the engine's weights "
                f"(first: {missing[:5]}); is it the same architecture, unwrapped?"
            )
            raise EngineError(msg)
        await self.engine.update_weights(state, version=version)


async def save_weights(model: torch.nn.Module, folder: Path) -> None:
    """Write `model` as a Hugging Face folder (config and safetensors shards) into `folder`,
    off the event loop; a previous save's shards are replaced."""
    save = getattr(model, "save_pretrained", None)
    if not callable(save):
        msg = (
            "a disk-based weight sync saves the model with save_pretrained (a Hugging Face "
            f"PreTrainedModel); got {type(model).__name__}"
        )
        raise TypeError(msg)

    def write() -> None:
        folder.mkdir(parents=True, exist_ok=True)
        save(str(folder))

    await asyncio.to_thread(write)


class DiskSync(ABC):
    """A sync through shards on disk: save them, then have the server load them (`_load`)."""

    def __init__(
        self,
        engine: HTTPEngineBase,
        folder: Path,
        *,
        api_key: str | None = None,
        timeout: float | None = 600.0,
    ) -> None:
        self.engine = engine
        # The server resolves the path against its own working directory.
        self.folder = Path(folder).resolve()
        self._api_key = api_key
        self._timeout = timeout

    async def push(self, model: torch.nn.Module, version: int) -> None:
        """Save `model` into `folder` and have the server load it; the engine's version is
        `version` afterwards."""
        await self._sync(version, model)

    async def push_saved(self, version: int) -> None:
        """Have the server load the shards another process saved into `folder` (a trainer on
        a disk this machine shares, `rltap.distributed`); the engine's version is `version`."""
        await self._sync(version, None)

    async def _sync(self, version: int, model: torch.nn.Module | None) -> None:
        client = EngineHTTPClient(
            self.engine.url,
            engine=self.engine.engine_name,
            api_key=self._api_key,
            timeout=self._timeout,
        )
        try:
            await self._preflight(client)
            if model is not None:
                await save_weights(model, self.folder)
            await self._load(client, version)
        finally:
            await client.close()

    @abstractmethod
    async def _preflight(self, client: EngineHTTPClient) -> None:
        """Fail before the save (which takes a while for a large model) if the server lacks
        what `_load` needs."""

    @abstractmethod
    async def _load(self, client: EngineHTTPClient, version: int) -> None:
        """Have the server load the shards in `self.folder`; set the engine's version."""


class _Reply(NamedTuple):
    status: int
    data: Any  # the decoded JSON body; None when empty or not JSON, as some routes answer
    payload: bytes


async def _call(
    client: EngineHTTPClient,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    **params: str,
) -> _Reply:
    """Send `body` as JSON to `path` (with query `params`); the reply, whatever its status."""
    url = client.base_url + path
    data = None if body is None else orjson.dumps(body)
    with map_http_errors(client.engine, url):
        request = client.session().request(
            method, url, params=params, data=data, allow_redirects=False
        )
        async with request as response:
            payload = await response.read()
    try:
        data = orjson.loads(payload) if payload.strip() else None
    except orjson.JSONDecodeError:
        data = None
    return _Reply(response.status, data, payload)


class VLLMSync(DiskSync):
    """Reloads a vLLM server's weights from saved shards through its development API.

    The server must run with `VLLM_SERVER_DEV_MODE=1` (vLLM >= 0.32's `/pause`, `/resume` and
    `/collective_rpc` routes); without it the first push fails with an `EngineError` saying so.

    Usage:
        sync = VLLMSync(engine, Path("RUN/sync"))
        await sync.push(trainer_model, version=1)
    """

    async def _preflight(self, client: EngineHTTPClient) -> None:
        await self._expect(client, "GET", "/is_paused")

    async def _load(self, client: EngineHTTPClient, version: int) -> None:
        await self._expect(client, "POST", "/pause", {}, mode="wait")
        try:
            await self._reload(client, version)
        except EngineError as exc:
            msg = (
                f"{exc.message}; vLLM stays paused (its weights may be half loaded): push "
                "again, or POST /resume to serve what it holds"
            )
            raise EngineError(msg, is_retryable=exc.is_retryable) from exc
        await self._expect(client, "POST", "/resume", {})

    async def _reload(self, client: EngineHTTPClient, version: int) -> None:
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(self.folder)}}
        await self._expect(client, "POST", "/collective_rpc", rpc)
        reset = await self._expect(client, "POST", "/reset_prefix_cache", {})
        if not (isinstance(reset, dict) and reset.get("success") is True):
            msg = f"vLLM did not reset its prefix cache after reloading the weights: {reset}"
            raise EngineError(msg)
        version_body = {"new_version": str(version)}
        await self._expect(client, "POST", "/update_weight_version", version_body)
        self.engine.set_version(version)

    async def _expect(
        self,
        client: EngineHTTPClient,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        **params: str,
    ) -> Any:
        reply = await _call(client, method, path, body, **params)
        if reply.status == 404:
            msg = (
                f"vLLM at {client.base_url} has no {path} route: weight sync needs vLLM's "
                f"development API; start the server with {_DEV_MODE} in its environment"
            )
            raise EngineError(msg)
        if reply.status >= 400:
            raise error_for_status(client.engine, reply.status, reply.payload)
        return reply.data


class SGLangSync(DiskSync):
    """Has an SGLang server load saved shards with `POST /update_weights_from_disk`.

    Usage:
        sync = SGLangSync(engine, Path("RUN/sync"))
        await sync.push(trainer_model, version=1)
    """

    async def _preflight(self, client: EngineHTTPClient) -> None:
        """Nothing to probe: `/update_weights_from_disk` is part of every SGLang server."""

    async def _load(self, client: EngineHTTPClient, version: int) -> None:
        body = {"model_path": str(self.folder), "weight_version": str(version)}
        reply = await _call(client, "POST", "/update_weights_from_disk", body)
        # A failed load answers HTTP 400 with the same fields as a success.
        if not (isinstance(reply.data, dict) and "success" in reply.data):
            if reply.status >= 400:
                raise error_for_status(client.engine, reply.status, reply.payload)
            msg = f"SGLang sent no success field: {reply.payload[:500]!r}"
            raise EngineError(msg)
        if reply.data["success"] is not True:
            msg = f"SGLang could not load the weights in {self.folder}: {reply.data.get('message')}"
            raise EngineError(msg)
        self.engine.set_version(version)
