"""The viewer's JSON routes over HTTP: the list filtered and sorted, errors in its envelope."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest
from capture_run import Recorded


def _get(viewer_url: str, path: str) -> httpx.Response:
    return httpx.get(f"{viewer_url}{path}", timeout=30)


def test_runs_list_both_runs_with_the_train_runs_steps(viewer_url: str) -> None:
    runs = {run["name"]: run for run in _get(viewer_url, "/api/runs").json()["runs"]}
    assert sorted(runs) == ["rollout", "train"]
    assert runs["rollout"]["sessions"] == 3
    assert runs["rollout"]["steps"] == []
    assert [step["reward_mean"] for step in runs["train"]["steps"]] == [0.1, 0.3, 0.2, 0.6, 0.9]
    assert sum(runs["rollout"]["histogram"]["counts"]) == 3


@pytest.mark.parametrize(
    ("query", "tasks"),
    [
        pytest.param("sort=reward&desc=true", ["siblings", "ended", "open"], id="by-reward"),
        pytest.param("sort=tokens", ["siblings", "open", "ended"], id="by-tokens"),
        pytest.param("state=interrupted", ["open"], id="state"),
        pytest.param("errors=true", ["open"], id="errors"),
        pytest.param("q=sibl", ["siblings"], id="search-task"),
        pytest.param("sort=reward&limit=1&offset=1", ["ended"], id="page"),
    ],
)
def test_the_session_list_sorts_filters_and_pages(
    viewer_url: str, query: str, tasks: list[str]
) -> None:
    body = _get(viewer_url, f"/api/runs/rollout/sessions?{query}").json()
    assert [session["task_id"] for session in body["sessions"]] == tasks
    assert body["states"] == ["ended", "interrupted"]


def test_a_session_tree_holds_rewards_before_and_after_discounting(
    viewer_url: str, recorded: Recorded
) -> None:
    ended = recorded.sessions["ended"]
    tree = _get(viewer_url, f"/api/runs/rollout/sessions/{ended.session_id}?discount=0.9").json()
    assert [node["interaction_id"] for node in tree["nodes"]] == ended.replies
    assert [node["reward"] for node in tree["nodes"]] == [None, None, 1.0]
    assert [node["discounted"] for node in tree["nodes"]] == pytest.approx([0.81, 0.9, 1.0])
    assert [node["link"] for node in tree["nodes"]] == ["root", "prefix", "prefix"]


@pytest.mark.parametrize(
    ("path", "status", "param"),
    [
        pytest.param("/api/runs/nope/sessions", 404, "run", id="unknown-run"),
        pytest.param("/api/runs/rollout/sessions/nope", 404, "session_id", id="unknown-session"),
        pytest.param(
            "/api/runs/rollout/interactions/nope", 404, "interaction_id", id="unknown-call"
        ),
        pytest.param("/api/runs/rollout/sessions?sort=mood", 400, "sort", id="bad-sort"),
        pytest.param("/api/runs/rollout/sessions?limit=0", 400, "limit", id="limit-0"),
        pytest.param("/api/runs/rollout/sessions?desc=maybe", 400, "desc", id="bad-bool"),
        pytest.param("/static/../app.py", 404, None, id="outside-static"),
    ],
)
def test_bad_requests_get_the_viewers_error_body(
    viewer_url: str, path: str, status: int, param: str | None
) -> None:
    reply = _get(viewer_url, path)
    assert reply.status_code == status
    if param is not None:
        error = reply.json()["error"]
        assert error["param"] == param
        assert error["message"]


def test_a_bad_discount_is_refused(viewer_url: str, recorded: Recorded) -> None:
    session_id = recorded.sessions["ended"].session_id
    reply = _get(viewer_url, f"/api/runs/rollout/sessions/{session_id}?discount=2")
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "discount"


def test_a_file_that_is_no_capture_store_is_refused_before_serving(tmp_path: Path) -> None:
    from rltap.view import create_view_app

    other = tmp_path / "capture.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    before = other.read_bytes()
    with pytest.raises(ValueError, match="is not an rltap capture store"):
        create_view_app(tmp_path)
    assert other.read_bytes() == before


def test_a_train_runs_steps_read_past_a_nan_metric_and_a_line_being_written(
    tmp_path: Path,
) -> None:
    from rltap.view.runs import Run

    metrics = '{"step": 1, "reward_mean": 0.5, "reward_std": 0.1, "kl": NaN}\n{"step": 2, "rew'
    (tmp_path / "metrics.jsonl").write_text(metrics)
    steps = Run("train", tmp_path / "capture.sqlite").steps()
    assert steps == [{"step": 1.0, "reward_mean": 0.5, "reward_std": 0.1}]
