"""A proxy killed with SIGKILL loses nothing it answered: started again on the same store, it
exports every call that completed before the kill, sessions open at the kill as `interrupted`."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from capture_run import Recorded

from rltap.client import interactions_from_export
from rltap.proxy.state import key_digest


def _export(recorded: Recorded, name: str, **settings: object) -> dict[str, object]:
    session_id = recorded.sessions[name].session_id
    reply = recorded.restarted.admin("/export_trajectories", {"session_id": session_id, **settings})
    assert reply.status_code == 200, reply.text
    body: dict[str, object] = reply.json()
    return body


def test_an_ended_session_exports_after_the_kill_as_it_would_have_before(
    recorded: Recorded,
) -> None:
    session = recorded.sessions["ended"]
    body = _export(recorded, "ended", discount=0.9)
    assert body["state"] == "ended"
    assert body["not_exported"] == []
    exported = interactions_from_export(body)
    assert list(exported) == session.replies
    # The chain A -> B -> C, C rewarded 1.0: discounted 0.81, 0.9, 1.0 along the prefix links.
    assert [node.reward for node in exported.values()] == pytest.approx([0.81, 0.9, 1.0])
    assert [node.parent_id for node in exported.values()] == [None, *session.replies[:2]]
    for interaction_id, node in exported.items():
        assert node.model_response is not None
        # The logprobs the client was answered with, token for token (float32 as stored).
        recorded_logprobs = np.float32(session.logprobs[interaction_id])
        np.testing.assert_allclose(node.model_response.output_logprobs, recorded_logprobs)
        assert node.model_response.output_versions == [0] * node.model_response.output_len


def test_a_session_open_at_the_kill_exports_its_completed_calls_as_interrupted(
    recorded: Recorded,
) -> None:
    session = recorded.sessions["open"]
    assert "1 sessions still open at the last proxy's end" in recorded.restarted.output()
    body = _export(recorded, "open")
    assert body["state"] == "interrupted"
    exported = interactions_from_export(body)
    assert list(exported) == session.replies
    assert exported[session.replies[0]].reward == pytest.approx(0.5)  # its reward by id
    # The call refused for its length is reported, never training data.
    [failed] = body["not_exported"]  # type: ignore[misc]
    assert failed["status"] == "failed"
    assert "maximum context length" in failed["error"]


def test_a_session_is_exported_once_across_the_restart(recorded: Recorded) -> None:
    _export(recorded, "siblings")
    session_id = recorded.sessions["siblings"].session_id
    again = recorded.restarted.admin("/export_trajectories", {"session_id": session_id})
    assert again.status_code == 404


def test_an_old_key_is_told_its_session_is_gone_after_the_restart(recorded: Recorded) -> None:
    session = recorded.sessions["open"]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "still there?"}]}
    reply = recorded.restarted.session("/v1/chat/completions", session.key, body)
    assert reply.status_code == 410  # known by its digest in the store: gone, not invalid
    assert f"session {session.session_id} belonged to an earlier proxy" in reply.text
    unknown = recorded.restarted.session("/v1/chat/completions", "sk-never-issued", body)
    assert unknown.status_code == 401


def test_session_keys_are_stored_as_digests_only(recorded: Recorded) -> None:
    with sqlite3.connect(recorded.store) as conn:
        digests = dict(conn.execute("SELECT session_id, key_hash FROM sessions"))
    for session in recorded.sessions.values():
        assert digests[session.session_id] == key_digest(session.key)
    files = [recorded.store, recorded.store.with_name(recorded.store.name + "-wal")]
    raw = b"".join(path.read_bytes() for path in files if path.exists())
    for session in recorded.sessions.values():
        assert session.key.encode() not in raw
