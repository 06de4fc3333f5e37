"""Isolation: a session key reaches its own session only, the admin key is never a session key,
keys are compared in constant time and never written to a log.

Covered elsewhere, not repeated here: every session route answering 403 to the admin key and
every admin route answering 403 to a session key (its own export included), another session's
interaction unknown to set_reward (404) (tests/proxy/test_errors.py); 500 concurrent sessions
whose exports hold exactly their own calls (test_load.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
from typing import Any

import httpx
import pytest
from reliability_support import GENERATION_PATHS, MakeProxy, assert_error, generation_body

from rltap.chat.renderer import ChatRenderer
from rltap.engines.base import InferenceEngine
from rltap.proxy.state import SessionState, SessionStore
from rltap.record.errors import AuthenticationError
from rltap.session.session import Session
from rltap.testing.proxy import RunningProxy

SESSION_ROUTES = [*GENERATION_PATHS, "/chat/completions", "/responses", "/rl/set_reward"]


async def post(proxy: RunningProxy, path: str, body: Any = None, **headers: str) -> httpx.Response:
    return await proxy.http.post(f"{proxy.url}{path}", json=body, headers=headers)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_a_session_key_reaches_nothing_of_another_session(proxy: RunningProxy) -> None:
    a_id, a_key = await proxy.start_session()
    b_id, b_key = await proxy.start_session()
    a_reply = await proxy.session_post(
        a_key, "/v1/responses", generation_body("/v1/responses", "a")
    )
    assert a_reply.status_code == 200, a_reply.text
    a_first = a_reply.json()["id"]

    # B cannot continue A's conversation by its response id: it is not in B's session.
    body = generation_body("/v1/responses", "b", previous_response_id=a_first)
    error = assert_error(
        "/v1/responses", await proxy.session_post(b_key, "/v1/responses", body), 404
    )
    assert error["param"] == "previous_response_id"
    # Naming A in a body does not make B act on A: the key alone chooses the session.
    body = generation_body("/v1/chat/completions", "b", session_id=a_id, user=a_id)
    b_reply = await proxy.session_post(b_key, "/v1/chat/completions", body)
    assert b_reply.status_code == 200, b_reply.text
    response = await proxy.session_post(
        b_key, "/rl/set_reward", {"reward": 9.0, "interaction_id": a_first, "session_id": a_id}
    )
    assert_error("/rl/set_reward", response, 404)
    response = await proxy.session_post(b_key, "/rl/end_session", {"session_id": a_id})
    ended = {"session_id": b_id, "state": "ended", "interaction_count": 1, "message": "success"}
    assert response.json() == ended
    assert proxy.state.store.get(a_id).state is SessionState.ACTIVE
    # With both headers, the Authorization header is the key; x-api-key is not a second one.
    headers = {**bearer(a_key), "x-api-key": b_key}
    body = generation_body("/v1/messages", "a again")
    a_second = await post(proxy, "/v1/messages", body, **headers)
    assert a_second.status_code == 200, a_second.text
    # B exports nothing, A's own or B's: export needs the admin key.
    for session_id in (a_id, b_id):
        response = await post(
            proxy, "/export_trajectories", {"session_id": session_id}, **bearer(b_key)
        )
        assert_error("/export_trajectories", response, 403)

    assert (await proxy.session_post(a_key, "/rl/end_session")).status_code == 200
    export_a = await proxy.export(a_id)
    assert [i["interaction_id"] for i in export_a["interactions"]] == [
        a_first,
        a_second.json()["id"],
    ]
    assert [i["reward"] for i in export_a["interactions"]] == [0.0, 0.0]
    export_b = await proxy.export(b_id)
    assert [i["interaction_id"] for i in export_b["interactions"]] == [b_reply.json()["id"]]


@pytest.mark.parametrize("path", [pytest.param(p, id=p) for p in SESSION_ROUTES])
@pytest.mark.parametrize("header", ["authorization", "x-api-key"])
async def test_the_admin_key_is_never_a_session_key(
    proxy: RunningProxy, path: str, header: str
) -> None:
    value = f"Bearer {proxy.admin_key}" if header == "authorization" else proxy.admin_key
    body = generation_body(path, "hi") if path not in ("/rl/set_reward",) else {"reward": 1.0}
    response = await post(proxy, path, body, **{header: value})
    assert_error(path, response, 403)


@pytest.mark.parametrize(
    "chosen",
    [
        pytest.param(lambda admin: admin, id="the-admin-key"),
        pytest.param(lambda admin: f" {admin}\n", id="the-admin-key-padded"),
        pytest.param(lambda admin: "sk-trailing-newline\n", id="padded"),
        pytest.param(lambda admin: "sk-caf\u00e9", id="not-ascii"),
        pytest.param(lambda admin: "sk-\u0000", id="control-character"),
    ],
)
async def test_a_chosen_session_key_that_is_or_reads_as_another_key_is_refused(
    proxy: RunningProxy, chosen: Any
) -> None:
    # Keys arrive stripped of surrounding blanks: a padded key could never be used, and the
    # padded admin key would read as the admin key.
    response = await proxy.admin("/rl/start_session", {"api_key": chosen(proxy.admin_key)})
    error = assert_error("/rl/start_session", response, 400)
    assert error["param"] == "api_key"
    assert proxy.state.store.open_sessions == 0


def test_keys_are_compared_in_constant_time_and_stored_as_digests(
    monkeypatch: pytest.MonkeyPatch, held_engine: InferenceEngine, renderer: ChatRenderer
) -> None:
    compared: list[tuple[Any, Any]] = []
    real_compare = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    admin_key = "admin-key-under-test-0123456789"
    store = SessionStore(admin_key, lambda sid: Session(held_engine, renderer, session_id=sid))

    def digest(key: str) -> bytes:
        return hashlib.blake2b(key.encode(), digest_size=32).digest()

    store.require_admin(admin_key)
    with pytest.raises(AuthenticationError, match="invalid API key"):
        store.require_admin("admin-key-under-test-0123456780")
    # Both were BLAKE2b digests compared with hmac.compare_digest, never the keys themselves.
    assert compared == [
        (digest(admin_key), digest(admin_key)),
        (digest("admin-key-under-test-0123456780"), digest(admin_key)),
    ]

    session_id, key = store.start()
    record = store.get(session_id)
    assert list(store._by_key) == [digest(key)]  # looked up by digest: a dict of digests
    assert record.key_hash == digest(key)
    for item in dataclasses.fields(record):
        assert key not in repr(getattr(record, item.name))  # the key itself is kept nowhere
    assert store.session_for_key(key) is record


LOGGERS = ["", "uvicorn", "uvicorn.error", "uvicorn.access", "rltap", "fastapi", "httpx"]


async def test_no_key_is_ever_written_to_a_log(
    make_proxy: MakeProxy, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = await make_proxy()
    # After the server configured its logging: everything at DEBUG, access log included, into
    # the capture (uvicorn's loggers do not propagate by default).
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
        if name:
            monkeypatch.setattr(logging.getLogger(name), "propagate", True)

    keys = [proxy.admin_key, "sk-chosen-by-the-trainer-42", "sk-wrong-key-never-valid"]
    bodies: list[str] = []

    async def send(path: str, body: Any, **headers: str) -> httpx.Response:
        response = await post(proxy, path, body, **headers)
        bodies.append(response.text)
        return response

    chosen_id, _ = await proxy.start_session(api_key=keys[1])
    session_id, key = await proxy.start_session()
    keys.append(key)
    for path in GENERATION_PATHS:
        for stream in (False, True):
            body = generation_body(path, "hi", stream=stream)
            assert (await send(path, body, **bearer(key))).status_code == 200
            assert (await send(path, body, **{"x-api-key": keys[1]})).status_code == 200
        await send(path, generation_body(path, "hi"), **bearer(keys[2]))  # 401
        await send(path, generation_body(path, "hi"), **bearer(proxy.admin_key))  # 403
        await send(path, {"broken": True}, **bearer(key))  # 400
    await send("/rl/set_reward", {"reward": 1.0}, **bearer(key))
    await send("/export_trajectories", {"session_id": session_id}, **bearer(key))  # 403
    await send("/rl/start_session", {"api_key": keys[1]}, **bearer(proxy.admin_key))  # 409
    for ended in (key, keys[1]):
        await send("/rl/end_session", None, **bearer(ended))
        await send(
            "/v1/chat/completions", generation_body("/v1/chat/completions", "x"), **bearer(ended)
        )  # 410
    await proxy.export(session_id)
    await proxy.export(chosen_id)
    await send("/rl/set_reward", {"reward": 1.0}, **bearer(key))  # 401: exported, forgotten
    bodies.append((await proxy.http.get(f"{proxy.url}/metrics")).text)

    names = {record.name for record in caplog.records}
    assert "uvicorn.access" in names  # the access log was on and captured
    for record in caplog.records:
        text = f"{record.getMessage()} {record.args!r} {record.exc_text or ''}"
        for secret in keys:
            assert secret.strip() not in text, (record.name, text)
    for secret in keys:
        assert secret not in caplog.text
        assert not any(secret in body for body in bodies)  # nor echoed back in a reply
