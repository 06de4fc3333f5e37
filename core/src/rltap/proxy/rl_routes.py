"""The RL control surface: capacity, sessions, rewards, policy version, export; and health.

Admin routes take the admin key; session routes the session key (`Authorization: Bearer` or
`x-api-key`). Export bodies encode tensors as described in `rltap.tensor_codec`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request, Response

from rltap.errors import Conflict, InvalidRequest
from rltap.proxy.requests import read_json, request_key
from rltap.proxy.state import SessionRecord, SessionState
from rltap.rewards import check_reward
from rltap.tensor_codec import encode_tensors
from rltap.types import InteractionStatus, InteractionWithTokenLogpReward

if TYPE_CHECKING:
    from rltap.proxy.app import ProxyState

__all__ = ["add_routes", "export_body"]

_MAX_VERSION = 2**31 - 1


def _json(body: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")


def _field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        msg = f"{name} must be {getattr(kind, '__name__', kind)}, got a boolean"
        raise InvalidRequest(msg, param=name)
    if not isinstance(value, kind):
        msg = f"{name} has the wrong type {type(value).__name__}"
        raise InvalidRequest(msg, param=name)
    return value


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = float(_field(body, name, (int, float), default))
    if not (math.isfinite(value) and low <= value <= high):
        msg = f"{name} must be a number in [{low}, {high}], got {value}"
        raise InvalidRequest(msg, param=name)
    return value


def add_routes(app: FastAPI, state: ProxyState) -> None:
    store = state.store

    @app.post("/grant_capacity")
    async def grant_capacity(request: Request) -> Response:
        store.require_admin(request_key(request))
        expires_in = store.grant()
        state.metrics.open_sessions.set(store.open_sessions)
        return _json({"granted": True, "expires_in": expires_in})

    @app.post("/rl/start_session")
    async def start_session(request: Request) -> Response:
        store.require_admin(request_key(request))
        body = await read_json(request, allow_empty=True)
        task_id = _field(body, "task_id", str, None)
        api_key = _field(body, "api_key", str, None)
        session_id, key = store.start(task_id=task_id, api_key=api_key)
        state.metrics.open_sessions.set(store.open_sessions)
        return _json({"session_id": session_id, "api_key": key})

    @app.post("/rl/set_reward")
    async def set_reward(request: Request) -> Response:
        record = store.session_for_key(request_key(request))
        body = await read_json(request)
        if "reward" not in body:
            raise InvalidRequest("reward is required", param="reward")
        reward = check_reward(body["reward"])
        interaction_id = _field(body, "interaction_id", str, None)
        cache = record.session.cache
        if interaction_id is None:
            interaction_id = cache.set_last_reward(reward)
        else:
            cache.set_reward(interaction_id, reward)
        return _json({"interaction_id": interaction_id, "reward": reward})

    @app.post("/rl/end_session")
    async def end_session(request: Request) -> Response:
        record = store.session_for_key(request_key(request))
        store.end(record)
        state.metrics.open_sessions.set(store.open_sessions)
        return _json({"session_id": record.session_id, "state": record.state.value})

    @app.post("/rl/set_version")
    async def set_version(request: Request) -> Response:
        store.require_admin(request_key(request))
        body = await read_json(request)
        version = _field(body, "version", int, None)
        # Exports carry versions as int32: a larger one would fail every later export.
        if version is None or not 0 <= version <= _MAX_VERSION:
            msg = f"version must be an integer in [0, {_MAX_VERSION}]"
            raise InvalidRequest(msg, param="version")
        state.engine.set_version(version)
        return _json({"version": state.engine.version})

    @app.post("/export_trajectories")
    async def export_trajectories(request: Request) -> Response:
        store.require_admin(request_key(request))
        body = await read_json(request)
        session_id = _field(body, "session_id", str, None)
        if session_id is None:
            raise InvalidRequest("session_id is required", param="session_id")
        discount = _number(body, "discount", 1.0, 0.0, 1.0)
        style = _field(body, "style", str, "individual")
        aggregate = _field(body, "aggregate", str, "mean")
        timeout = _number(
            body,
            "wait_timeout",
            state.config.export_wait_timeout,
            0.0,
            state.config.max_export_wait,
        )
        record = store.get(session_id)
        await _wait_until_done(record, timeout)
        exported = export_body(record, discount, style, aggregate)
        store.free(record)
        state.metrics.open_sessions.set(store.open_sessions)
        return _json(exported)

    @app.get("/health")
    async def health() -> Response:
        return _json(
            {"status": "ok", "model": state.config.model_name, "version": state.engine.version}
        )

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        key = request_key(request)
        if not (key and store.is_admin(key)):
            store.session_for_key(key)
        model = {
            "id": state.config.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "rltap",
        }
        return _json({"object": "list", "data": [model]})

    @app.get("/metrics")
    async def metrics() -> Response:
        # The reaper and grant expiry change this without a request: read it at scrape time.
        state.metrics.open_sessions.set(store.open_sessions)
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
    response = node.model_response
    assert response is not None
    return {
        "interaction_id": node.interaction_id,
        "parent_id": node.parent_id,
        "reward": node.reward,
        "messages": node.messages,
        "output_message_list": node.output_message_list,
        "output_text": node.output_text,
        "input_len": response.input_len,
        "output_len": response.output_len,
        "stop_reason": response.stop_reason.value,
        "logprob_convention": response.logprob_convention.value,
        "tensors": encode_tensors(node.to_tensor_dict()),
    }


def export_body(
    record: SessionRecord, discount: float, style: Any, aggregate: Any
) -> dict[str, Any]:
    """The export of one session: every exported interaction with its tensors, and what failed."""
    cache = record.session.cache
    exported = cache.export_interactions(style=style, reward_discount=discount, aggregate=aggregate)
    not_exported = [
        {"interaction_id": node.interaction_id, "status": node.status.value, "error": node.error}
        for node in cache.values()
        if node.status is not InteractionStatus.COMPLETE
    ]
    return {
        "session_id": record.session_id,
        "task_id": record.task_id,
        "state": record.state.value,
        "style": style,
        "discount": discount,
        "interactions": [_encode(node) for node in exported.values()],
        "not_exported": not_exported,
    }
