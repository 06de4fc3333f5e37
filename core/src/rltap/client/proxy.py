"""OpenAIProxyClient: one session on a running proxy, from the trainer's side.

Usage:
    async with OpenAIProxyClient("http://127.0.0.1:8000", admin_key) as session:
        await agent.run(data, base_url=session.base_url, api_key=session.api_key)
        await session.set_last_reward(1.0)
    interactions = await session.export_interactions(discount=0.9, style="concat")

Style "tree" is one `TreePack` (`rltap.record.pack`), not interactions: `export_tree` returns it;
`export_trajectories` returns the raw body, which `tree_from_export` decodes and
`interactions_from_export` reads (each interaction's own sequence, cut out of that pack: given
the pack `tree_from_export` returned, the body's tree is decoded once).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

import httpx
import numpy as np

from rltap.record import errors
from rltap.record.exported import TOKEN_COLUMNS, ExportedInteraction
from rltap.record.pack_io import decode_pack
from rltap.record.sampling import EpisodeSampling
from rltap.record.tensor_codec import decode_arrays
from rltap.record.types import (
    InteractionWithTokenLogpReward,
    TokenSequence,
)
from rltap.tree.rewards import DiscountMode

if TYPE_CHECKING:
    from rltap.record.pack import TreePack

__all__ = ["OpenAIProxyClient", "Reply", "interactions_from_export", "tree_from_export"]

_RETRYABLE = frozenset({429, 503})


class Reply(NamedTuple):
    """What `OpenAIProxyClient` needs of one HTTP response, whichever library fetched it."""

    status: int
    retry_after: str | None
    content: bytes


def _raise_for(reply: Reply) -> None:
    if 200 <= reply.status < 300:
        return
    try:
        message = json.loads(reply.content)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = reply.content.decode("utf-8", "replace")
    if reply.status == 429:
        raise errors.CapacityExhausted(message, retry_after=float(reply.retry_after or "1"))
    raise errors.error_for_status(reply.status, message)


class OpenAIProxyClient:
    """Starts a session on enter (retrying 429/503 with backoff) and ends it on exit.

    `base_url` (ends in /v1) and `api_key` are what the agent's OpenAI client needs.
    """

    def __init__(
        self,
        proxy_url: str,
        admin_key: str,
        *,
        task_id: str | None = None,
        sampling: EpisodeSampling | None = None,
        http_client: httpx.AsyncClient | None = None,
        max_retries: int = 8,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
    ) -> None:
        self.proxy_url = proxy_url.rstrip("/")
        self._admin_headers = {"authorization": f"Bearer {admin_key}"}
        self.task_id = task_id
        self.sampling = sampling
        self._http = http_client  # made on first use when None
        self._owns_http = http_client is None
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.session_id: str | None = None
        self.api_key: str | None = None
        self._ended = False

    @property
    def base_url(self) -> str:
        return f"{self.proxy_url}/v1"

    @property
    def http_client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0))
        return self._http

    async def __aenter__(self) -> OpenAIProxyClient:
        await self.start_session()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._ended and self.api_key is not None:
            try:
                await self.end_session()
            except errors.SessionGone:
                self._ended = True

    async def aclose(self) -> None:
        if self._owns_http and self._http is not None:
            await self._http.aclose()

    async def _send(self, url: str, body: dict[str, Any] | None, headers: dict[str, str]) -> Reply:
        """One POST: the only place that knows the HTTP library (`rltap.areal`'s: aiohttp)."""
        response = await self.http_client.post(url, json=body, headers=headers)
        return Reply(response.status_code, response.headers.get("retry-after"), response.content)

    async def _post(
        self, path: str, body: dict[str, Any] | None, *, admin: bool, retry: bool = False
    ) -> dict[str, Any]:
        headers = self._admin_headers if admin else {"authorization": f"Bearer {self.api_key}"}
        delay = self.backoff
        for attempt in range(self.max_retries + 1):
            reply = await self._send(f"{self.proxy_url}{path}", body, headers)
            if not (retry and reply.status in _RETRYABLE and attempt < self.max_retries):
                _raise_for(reply)
                result: dict[str, Any] = json.loads(reply.content)
                return result
            hinted = float(reply.retry_after or delay)
            await asyncio.sleep(min(self.max_backoff, max(delay, hinted)) * random.uniform(0.5, 1))
            delay = min(self.max_backoff, delay * 2)
        raise AssertionError("unreachable")  # the last attempt raises or returns

    async def start_session(self) -> str:
        await self._post("/grant_capacity", None, admin=True, retry=True)
        body: dict[str, Any] = {} if self.task_id is None else {"task_id": self.task_id}
        if self.sampling is not None:
            body["sampling"] = asdict(self.sampling)
        result = await self._post("/rl/start_session", body, admin=True, retry=True)
        self.session_id, self.api_key = result["session_id"], result["api_key"]
        return str(self.session_id)

    async def set_reward(self, interaction_id: str, reward: float) -> None:
        body = {"interaction_id": interaction_id, "reward": reward}
        await self._post("/rl/set_reward", body, admin=False)

    async def set_last_reward(self, reward: float) -> str:
        result = await self._post("/rl/set_reward", {"reward": reward}, admin=False)
        return str(result["interaction_id"])

    async def set_rewards(self, rewards: Mapping[str, float]) -> dict[str, Any]:
        """Rewards keyed all by interaction id or all by agent (`POST /rl/set_rewards`); the
        answer says which (`keyed_by`), what each interaction got and the agents left out."""
        return await self._post("/rl/set_rewards", {"rewards": dict(rewards)}, admin=False)

    async def end_session(self) -> None:
        await self._post("/rl/end_session", None, admin=False)
        self._ended = True

    async def export_interactions(
        self,
        discount: float = 1.0,
        style: str = "individual",
        aggregate: str = "mean",
        wait_timeout: float | None = None,
        link_factors: Mapping[str, float] | None = None,
        agents: Sequence[str] | None = None,
        *,
        discount_mode: DiscountMode | None = None,
    ) -> dict[str, InteractionWithTokenLogpReward]:
        """Export the session (it must be ended, or end within `wait_timeout`); the fields are
        `POST /export_trajectories`' (`discount_mode` is sent only when given). Style "tree"
        is refused here (`rltap.tree.export`): `export_tree` returns it."""
        if style == "tree":
            msg = "style 'tree' exports one TreePack, not interactions: call export_tree"
            raise errors.InvalidRequest(msg, param="style")
        body = await self.export_trajectories(
            discount=discount,
            style=style,
            aggregate=aggregate,
            wait_timeout=wait_timeout,
            link_factors=None if link_factors is None else dict(link_factors),
            agents=None if agents is None else list(agents),
            discount_mode=discount_mode,
        )
        return interactions_from_export(body)

    async def export_tree(self, discount: float = 1.0, **fields: Any) -> TreePack:
        """Export the session as style "tree": its interactions in one token trie; `fields` are
        `export_interactions`' other keywords."""
        return tree_from_export(
            await self.export_trajectories(discount=discount, style="tree", **fields)
        )

    async def export_trajectories(self, **fields: Any) -> dict[str, Any]:
        """The body of `POST /export_trajectories` (`rltap.proxy.control`) in rltap's format,
        whatever the proxy's default (`rltap serve --export-format`); `fields` are the
        request's, those None left out."""
        body = {"session_id": self.session_id, "format": "rltap"}
        body |= {name: value for name, value in fields.items() if value is not None}
        return await self._post("/export_trajectories", body, admin=True)


def tree_from_export(body: Mapping[str, Any]) -> TreePack:
    """The `TreePack` of an `/export_trajectories` body of style "tree"."""
    if "tree" not in body:
        msg = f"the export body is of style {body.get('style')!r}, not 'tree'"
        raise ValueError(msg)
    return decode_pack(body["tree"])


def _sequences(body: Mapping[str, Any], pack: TreePack | None) -> dict[str, TokenSequence]:
    """Each exported interaction's own token sequence (its prompt masked, as style individual).

    A tree body holds them in its pack (`pack`, or decoded here): an interaction's sequence is
    the path to its last generated token (or, for one that generated none, to the end of its
    leaf).
    """
    if "tree" not in body:
        sequences = {}
        for item in body["interactions"]:
            arrays = decode_arrays(item["tensors"])
            columns = {name: arrays[name][0].tolist() for name, _ in TOKEN_COLUMNS}
            sequences[item["interaction_id"]] = TokenSequence(**columns)
        return sequences
    if pack is None:
        pack = tree_from_export(body)
    generated = np.flatnonzero(pack.interaction_index >= 0)
    # Depth-first order: an interaction's last generated token is the last one it owns.
    last = dict(zip(pack.interaction_index[generated].tolist(), generated.tolist(), strict=True))
    ends = {leaf.interaction_id: int(leaf.path[-1]) for leaf in pack.leaves}
    ends |= {pack.interaction_ids[k]: index for k, index in last.items()}
    sequences = {}
    for item in body["interactions"]:
        path = pack.path_to(ends[item["interaction_id"]])
        prompt, output = path[: item["input_len"]], path[item["input_len"] :]
        sequence = TokenSequence()
        sequence.append_prompt(pack.input_ids[prompt].tolist())
        sequence.input_ids.extend(pack.input_ids[output].tolist())
        sequence.loss_mask.extend([1] * len(output))
        sequence.logprobs.extend(pack.logprobs[output].tolist())
        sequence.versions.extend(pack.versions[output].tolist())
        sequences[item["interaction_id"]] = sequence
    return sequences


def interactions_from_export(
    body: Mapping[str, Any], *, pack: TreePack | None = None
) -> dict[str, InteractionWithTokenLogpReward]:
    """Rebuild interactions from an `/export_trajectories` body; `to_tensor_dict()` round-trips
    (a tree body's interactions come back as style individual's, cut out of `pack`: the body's
    tree, when the caller decoded it already with `tree_from_export`)."""
    rebuilt: dict[str, InteractionWithTokenLogpReward] = {}
    sequences = _sequences(body, pack)
    own_sequence = body.get("style") in ("individual", "tree")
    for item in body["interactions"]:
        exported = ExportedInteraction.from_json(item)
        parent = rebuilt.get(exported.parent_id) if exported.parent_id else None
        rebuilt[exported.interaction_id] = exported.rebuild(
            sequences[exported.interaction_id], parent, own_sequence=own_sequence
        )
    return rebuilt
