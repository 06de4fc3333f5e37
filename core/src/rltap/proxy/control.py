"""The RL control surface: capacity, sessions, rewards, policy version, export; and health.

`admin_routes` take the admin key, `session_routes` a live session's key, `open_routes` none
(`rltap.proxy.routing` checks them). Bodies are pydantic models (strict types: a reward is a
number, not a string).

`POST /export_trajectories` answers in one of two formats, the request's `format` or else the
proxy's `LimitsConfig.export_format` (`rltap serve --export-format`), each with its tensor envelope
from `rltap.record.tensor_codec`:
- `"rltap"`: `{"session_id", "task_id", "state", "style", "discount", "discount_mode",
  "link_factors", "reward_scope", "interactions": [...], "not_exported": [...]}`, each
  interaction with its links, messages, lengths and `"tensors"`; the settings used are echoed.
- `"areal"`: AReaL 1.0.4's body, `{"interactions": {id: {"tensor_dict", "reward",
  "interaction_id"}}}` in insertion order, which AReaL's `OpenAIProxyClient.export_interactions`
  reads. It also carries `"not_exported"`, an extra key AReaL's reader ignores.
Style `"tree"` (rltap's format only; the areal format refuses it with a 400 naming `style`) gives
the same keys, with `"interactions"` holding each interaction's metadata without `"tensors"`,
and adds `"tree"`: the session's one token trie (`rltap.record.pack`), as `rltap.record.pack_io`'s
`encode_pack` writes it: `{"tensors": {per-token array: envelope}, "interaction_ids", "leaves":
[{"interaction_id", "reward", "path"}]}`.
`not_exported` lists the in-flight, failed and aborted interactions with their status and error.
`discount_mode` defaults to `"chain"` (AReaL's insertion-order numbers) in the areal format and to
`"tree"` in rltap's (`rltap.tree.rewards`).

`POST /rl/set_rewards` takes `{"rewards": {key: reward}}`, keyed all by interaction id or all by
agent (`rltap.tree.reward_targets`), and answers `{"keyed_by", "rewards": {interaction_id:
reward}, "missing_agents"}`. Rewards keyed by agent are meant for an export with `reward_scope`
`"agent"` (each agent's calls discounted from its own reward only); the default `"episode"`
discounts every reward over the whole tree.

`POST /rl/end_session` answers `{"session_id", "state", "interaction_count", "message":
"success"}`; `interaction_count` counts every call the session recorded, in flight included (as
AReaL counts them).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from rltap.proxy.requests import request_key
from rltap.proxy.routing import (
    AdminRoute,
    OpenRoute,
    SessionRoute,
    caller_session,
    json_response,
    proxy_state,
)
from rltap.proxy.state import ProxyState, SessionRecord, SessionState
from rltap.record.errors import Conflict, InvalidRequest, NotFound
from rltap.record.exported import ExportedInteraction
from rltap.record.pack_io import encode_pack
from rltap.record.sampling import MAX_SEED, EpisodeSampling
from rltap.record.tensor_codec import TensorEnvelope, encode_tensors
from rltap.record.types import InteractionStatus, InteractionWithTokenLogpReward
from rltap.session.session import Session
from rltap.tree.export import ExportStyle, export_tree
from rltap.tree.rewards import (
    Aggregate,
    DiscountMode,
    RewardScope,
    check_link_factors,
    check_reward,
)

__all__ = [
    "ROUTERS",
    "ExportRequest",
    "SamplingRequest",
    "SetRewardRequest",
    "SetRewardsRequest",
    "SetVersionRequest",
    "StartSessionRequest",
    "export_body",
]

# Exports carry versions as int32: a larger one would fail every later export.
_MAX_VERSION = 2**31 - 1
_BODY = ConfigDict(extra="allow", strict=True)

admin_routes = APIRouter(route_class=AdminRoute)
session_routes = APIRouter(route_class=SessionRoute)
open_routes = APIRouter(route_class=OpenRoute)
ROUTERS = (admin_routes, session_routes, open_routes)


class SamplingRequest(BaseModel):
    """`sampling` of `POST /rl/start_session`: `rltap.record.sampling.EpisodeSampling`."""

    model_config = _BODY
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    temperature: float | None = Field(default=None, ge=0.0, allow_inf_nan=False)


class StartSessionRequest(BaseModel):
    """`POST /rl/start_session`: an optional task id, a key of the caller's choosing, and the
    sampling every call of the episode gets (a seed, a temperature over the calls' own)."""

    model_config = _BODY
    task_id: str | None = None
    api_key: str | None = None
    sampling: SamplingRequest | None = None


class SetRewardRequest(BaseModel):
    """`POST /rl/set_reward`: a reward for one interaction, or for the last completed one."""

    model_config = _BODY
    reward: float
    interaction_id: str | None = None


class SetRewardsRequest(BaseModel):
    """`POST /rl/set_rewards`: rewards keyed all by interaction id or all by agent."""

    model_config = _BODY
    rewards: dict[str, float]


class SetVersionRequest(BaseModel):
    """`POST /rl/set_version`: the policy version the engine's next tokens carry."""

    model_config = _BODY
    version: int = Field(ge=0, le=_MAX_VERSION)


class ExportRequest(BaseModel):
    """`POST /export_trajectories`: one session's interactions, rewards discounted."""

    model_config = _BODY
    session_id: str
    # None: the proxy's `export_format`.
    format: TensorEnvelope | None = None
    # None: "chain" for the areal format, else "tree".
    discount_mode: DiscountMode | None = None
    discount: float = Field(default=1.0, ge=0.0, le=1.0, allow_inf_nan=False)
    style: ExportStyle = "individual"
    aggregate: Aggregate = "mean"
    # The share of a child's discounted reward its parent gets, by the child's link kind
    # ("prefix", "rewrite", "handoff", "subagent", "carry"; 1.0 each unless given;
    # `rltap.tree.rewards`).
    link_factors: dict[str, float] | None = None
    # Only these agents' interactions (concat: sequences); rewards discounted over all first.
    agents: list[str] | None = Field(default=None, min_length=1)
    # "episode": every reward discounted over the tree; "agent": each agent's calls from its own.
    reward_scope: RewardScope = "episode"
    # Seconds to wait for the session to end; at most the proxy's --max-export-wait.
    wait_timeout: float | None = Field(default=None, ge=0.0, allow_inf_nan=False)


@admin_routes.post("/grant_capacity")
async def grant_capacity(request: Request) -> Response:
    state = proxy_state(request)
    expires_in = state.store.grant()
    state.metrics.open_sessions.set(state.store.open_sessions)
    return json_response({"granted": True, "expires_in": expires_in})


@admin_routes.post("/rl/start_session")
async def start_session(request: Request, body: StartSessionRequest | None = None) -> Response:
    state = proxy_state(request)
    body = body or StartSessionRequest()
    sampling = EpisodeSampling(**body.sampling.model_dump()) if body.sampling else None
    session_id, key = state.store.start(
        task_id=body.task_id, api_key=body.api_key, sampling=sampling
    )
    state.metrics.open_sessions.set(state.store.open_sessions)
    return json_response({"session_id": session_id, "api_key": key})


@session_routes.post("/rl/set_reward")
async def set_reward(request: Request, body: SetRewardRequest) -> Response:
    record = caller_session(request)
    reward = check_reward(body.reward)
    cache = record.session.cache
    interaction_id = body.interaction_id
    if interaction_id is None:
        interaction_id = cache.set_last_reward(reward)
    else:
        cache.set_reward(interaction_id, reward)
    await cache.durable()
    return json_response({"interaction_id": interaction_id, "reward": reward})


@session_routes.post("/rl/set_rewards")
async def set_rewards(request: Request, body: SetRewardsRequest) -> Response:
    cache = caller_session(request).session.cache
    targets = cache.set_rewards(body.rewards)
    await cache.durable()
    return json_response(targets.to_json())


@session_routes.post("/rl/end_session")
async def end_session(request: Request) -> Response:
    state, record = proxy_state(request), caller_session(request)
    count = len(record.session.cache)
    state.store.end(record)
    state.metrics.open_sessions.set(state.store.open_sessions)
    await record.session.cache.durable()
    return json_response(
        {
            "session_id": record.session_id,
            "state": record.state.value,
            "interaction_count": count,
            "message": "success",
        }
    )


@admin_routes.post("/rl/set_version")
async def set_version(request: Request, body: SetVersionRequest) -> Response:
    state = proxy_state(request)
    state.engine.set_version(body.version)
    return json_response({"version": state.engine.version})


@admin_routes.post("/export_trajectories")
async def export_trajectories(request: Request, body: ExportRequest) -> Response:
    state = proxy_state(request)
    limits = state.config.limits
    timeout = limits.export_wait_timeout if body.wait_timeout is None else body.wait_timeout
    if timeout > limits.max_export_wait:
        msg = f"wait_timeout must be at most {limits.max_export_wait:g} seconds, got {timeout:g}"
        raise InvalidRequest(msg, param="wait_timeout")
    record = await _session_record(state, body.session_id)
    await _wait_until_done(record, timeout)
    # A 400 here (a bad link factor) keeps the session.
    exported = export_body(record, body, limits.export_format)
    state.store.free(record)
    state.metrics.open_sessions.set(state.store.open_sessions)
    if state.store.capture is not None:
        state.store.capture.session_exported(record.session_id)
        await state.store.capture.durable()
    return json_response(exported)


async def _session_record(state: ProxyState, session_id: str) -> SessionRecord:
    """The session in memory, else as the capture store kept it (a session of a proxy that
    died or restarted, or one whose export grace ran out): exported once, like any other."""
    try:
        return state.store.get(session_id)
    except NotFound:
        capture = state.store.capture
        if capture is None:
            raise
        stored = await asyncio.to_thread(capture.load, session_id)
        if stored is None or stored.exported is not None:
            raise
    session = Session(
        state.engine, state.renderer, state.config.chat, session_id=session_id,
        cache=stored.cache,
    )  # fmt: skip
    record = SessionRecord(
        session=session, key_hash=b"", task_id=stored.task_id, state=SessionState(stored.state)
    )
    record.ended.set()
    return record


@open_routes.get("/health")
async def health(request: Request) -> Response:
    state = proxy_state(request)
    body = {"status": "ok", "model": state.config.model_name, "version": state.engine.version}
    capture = state.store.capture
    if capture is not None and capture.failure is not None:  # every generation call is a 503
        return json_response({**body, "status": "store_unavailable", "error": capture.failure}, 503)
    return json_response(body)


@open_routes.get("/v1/models")
async def models(request: Request) -> Response:
    state = proxy_state(request)
    key = request_key(request)
    if not (key and state.store.is_admin(key)):  # the admin key or a live session's key
        state.store.session_for_key(key)
    model = {"id": state.config.model_name, "object": "model", "created": 0, "owned_by": "rltap"}
    return json_response({"object": "list", "data": [model]})


@open_routes.get("/metrics")
async def metrics(request: Request) -> Response:
    state = proxy_state(request)
    # The reaper and grant expiry change this without a request: read it at scrape time.
    state.metrics.open_sessions.set(state.store.open_sessions)
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")


async def _wait_until_done(record: SessionRecord, wait_seconds: float) -> None:
    """Wait for the session to end and its calls to finish, at most `wait_seconds`.

    Calls still running after that are reported as not exported, never half-written.
    """
    deadline = time.monotonic() + wait_seconds
    if record.state is SessionState.ACTIVE:
        try:
            await asyncio.wait_for(record.ended.wait(), wait_seconds)
        except TimeoutError:
            msg = (
                f"session {record.session_id} is still active after {wait_seconds:g}s; end it "
                "(POST /rl/end_session) or raise wait_timeout"
            )
            raise Conflict(msg, param="session_id") from None
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(record.idle.wait(), max(0.0, deadline - time.monotonic()))


def _encode(node: InteractionWithTokenLogpReward) -> dict[str, Any]:
    return _metadata(node) | {"tensors": encode_tensors(node.to_arrays())}


def _metadata(node: InteractionWithTokenLogpReward) -> dict[str, Any]:
    return ExportedInteraction.of(node).to_json()


def export_body(
    record: SessionRecord, request: ExportRequest, default_format: TensorEnvelope = "rltap"
) -> dict[str, Any]:
    """The export of one session in the request's format (else `default_format`): every
    exported interaction with its tensors, and what was not exported."""
    export_format = request.format or default_format
    tree = request.style == "tree"
    if tree and export_format == "areal":
        msg = "style 'tree' has no areal format (AReaL reads one tensor dict per interaction)"
        raise InvalidRequest(msg, param="style")
    mode = request.discount_mode or ("chain" if export_format == "areal" else "tree")
    cache = record.session.cache
    factors = check_link_factors(request.link_factors)
    exported = cache.export_interactions(
        # The tree packs the individual copies: their metadata and rewards come with it.
        style="individual" if tree else request.style,
        reward_discount=request.discount,
        aggregate=request.aggregate,
        mode=mode,
        link_factors=factors,
        agents=request.agents,
        reward_scope=request.reward_scope,
    )
    not_exported = [
        {"interaction_id": node.interaction_id, "status": node.status.value, "error": node.error}
        for node in cache.values()
        if node.status is not InteractionStatus.COMPLETE
    ]
    if export_format == "areal":
        return {"interactions": _areal_interactions(exported), "not_exported": not_exported}
    body = {
        "session_id": record.session_id,
        "task_id": record.task_id,
        "state": record.state.value,
        "style": request.style,
        "discount": request.discount,
        "discount_mode": mode,
        "link_factors": factors,
        "reward_scope": request.reward_scope,
        "interactions": [(_metadata if tree else _encode)(node) for node in exported.values()],
        "not_exported": not_exported,
    }
    if tree:
        body["tree"] = _tree(list(exported.values()))
    return body


def _tree(exported: list[InteractionWithTokenLogpReward]) -> dict[str, Any]:
    rewards = {node.interaction_id: float(node.reward or 0.0) for node in exported}
    return encode_pack(export_tree(exported, rewards))


def _areal_interactions(
    exported: Mapping[str, InteractionWithTokenLogpReward],
) -> dict[str, dict[str, Any]]:
    """AReaL's `serialize_interactions` shape for interactions that hold tensors."""
    return {
        interaction_id: {
            "tensor_dict": encode_tensors(node.to_arrays(), "areal"),
            "reward": node.reward,
            "interaction_id": interaction_id,
        }
        for interaction_id, node in exported.items()
    }
