"""`--store-retention`: exported sessions pruned by age or count; the rest never. One writer a
store."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from rltap.record.types import InteractionWithTokenLogpReward, ModelResponse
from rltap.store import CaptureStore, Retention, StoreInUse, parse_retention
from rltap.store.retention import prune
from rltap.tree.cache import InteractionCache


def _record(store: CaptureStore, session_id: str, exported: bool) -> None:
    store.session_started(session_id, b"\0" * 32, None)
    cache = InteractionCache(store.journal(session_id))
    response = ModelResponse(
        input_tokens=[1, 2], output_tokens=[3], output_logprobs=[-0.1], output_versions=[0]
    )
    node = cache.add(InteractionWithTokenLogpReward(messages=[{"role": "user", "content": "x"}]))
    cache.complete(node.interaction_id, response, [{"role": "assistant", "content": "y"}])
    store.session_ended(session_id, "ended")
    if exported:
        store.session_exported(session_id)
    store.flush()


def _stored(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        query = (
            "SELECT s.session_id, count(i.interaction_id) FROM sessions AS s "
            "LEFT JOIN interactions AS i USING (session_id) GROUP BY s.session_id"
        )
        return dict(conn.execute(query).fetchall())


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "capture.sqlite"
    store = CaptureStore(path)
    for number in range(4):
        _record(store, f"exported-{number}", exported=True)
    _record(store, "kept", exported=False)
    store.close()
    return path


def test_a_count_keeps_the_newest_exported_sessions_and_every_unexported_one(
    store_path: Path,
) -> None:
    CaptureStore(store_path, Retention(max_count=1)).close()  # pruned on opening
    assert _stored(store_path) == {"exported-3": 1, "kept": 1}


def test_an_age_prunes_sessions_exported_longer_ago(store_path: Path) -> None:
    with sqlite3.connect(store_path) as conn:
        assert prune(conn, Retention(max_age=3600)) == 0  # exported just now
        assert prune(conn, Retention(max_age=3600), now=time.time() + 7200) == 4
    assert _stored(store_path) == {"kept": 1}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("7d", Retention(max_age=7 * 86400), id="days"),
        pytest.param("12h", Retention(max_age=12 * 3600), id="hours"),
        pytest.param("30m", Retention(max_age=1800), id="minutes"),
        pytest.param("1000", Retention(max_count=1000), id="count"),
    ],
)
def test_retention_forms(text: str, expected: Retention) -> None:
    assert parse_retention(text) == expected


@pytest.mark.parametrize("text", ["", "soon", "-3", "0d", "1w"])
def test_a_bad_retention_is_refused_by_rltap_serve(tiny_model_dir: Path, text: str) -> None:
    from rltap.cli.commands import build_parser
    from rltap.config import ConfigError, ServerConfig, from_namespace

    argv = [
        "serve", "--engine", "scripted", "--script", "rltap.testing.scripts:echo",
        "--model", str(tiny_model_dir), "--store", "x.sqlite", "--store-retention", text,
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="--store-retention takes an age"):
        from_namespace(ServerConfig, build_parser().parse_args(argv))


def test_a_second_writer_on_a_store_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    first = CaptureStore(tmp_path / "capture.sqlite")
    with pytest.raises(StoreInUse, match="open in another proxy"):
        CaptureStore(tmp_path / "capture.sqlite", lock_wait=0.2)
    first.close()
    CaptureStore(tmp_path / "capture.sqlite").close()
