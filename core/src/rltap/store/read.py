"""Reading a capture store: where it is, its sessions, each session's restored cache.

A SOURCE (`rltap export`, `rltap inspect`, `rltap view`) is a store file, or a run folder
holding one: `rltap rollout` and `rltap train` keep theirs as `capture.sqlite` in `--out`.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rltap.record.errors import NotFound
from rltap.store.rows import COLUMNS, StoredSession, load_session, restore_cache
from rltap.store.schema import STORE_FILE, connect

__all__ = ["SESSION_TOTALS", "SessionSummary", "StoreReader", "find_store"]


def find_store(source: Path) -> Path:
    """The store file `source` names: itself, or its folder's `capture.sqlite`."""
    source = Path(source)
    if source.is_file():
        return source
    if source.is_dir():
        found = source / STORE_FILE
        if found.is_file():
            return found
        msg = f"{source} holds no capture store ({STORE_FILE}); pass a store file or a run folder"
        raise FileNotFoundError(msg)
    msg = f"{source} does not exist"
    raise FileNotFoundError(msg)


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One line of the session list: totals over the session's finished calls."""

    session_id: str
    task_id: str | None
    state: str
    started: float
    exported: bool
    calls: int
    errors: int
    reward: float
    prompt_tokens: int
    generated_tokens: int
    max_version: int


# `SessionSummary`'s columns, a row per session (the viewer's session list filters and sorts it).
SESSION_TOTALS = """
SELECT s.session_id, s.task_id, s.state, s.started, s.exported IS NOT NULL AS exported,
       count(i.interaction_id) AS calls, coalesce(sum(i.status != 'complete'), 0) AS errors,
       coalesce(sum(i.reward), 0.0) AS reward, coalesce(sum(i.input_len), 0) AS prompt_tokens,
       coalesce(sum(i.output_len), 0) AS generated_tokens,
       coalesce(max(i.max_version), -1) AS max_version
FROM sessions AS s LEFT JOIN interactions AS i ON i.session_id = s.session_id
GROUP BY s.session_id
"""


class StoreReader:
    """Read-only access to a store (a live proxy may be writing it: WAL readers see the last
    committed state)."""

    def __init__(self, source: Path) -> None:
        self.path = find_store(source)
        self.conn = connect(self.path, create=False)
        self.conn.row_factory = sqlite3.Row

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def summaries(self) -> list[SessionSummary]:
        query = f"{SESSION_TOTALS} ORDER BY s.started"
        return [SessionSummary(*row) for row in self.conn.execute(query)]

    def session_count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM sessions").fetchone()[0])

    def meta(self, key: str) -> str | None:
        """A fact the proxy recorded (`CaptureStore.set_meta`), or None."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def session(self, session_id: str) -> StoredSession:
        stored = load_session(self.conn, session_id)
        if stored is None:
            msg = f"no session {session_id!r} in {self.path}"
            raise NotFound(msg, param="session_id")
        return stored

    def sessions(self) -> Iterator[StoredSession]:
        """Every session with its restored cache, in the order they started: one pass over
        the interactions, one session in memory at a time."""
        order = "ORDER BY s.started, s.session_id"
        columns = ", ".join(f"i.{name}" for name in COLUMNS)
        query = (
            f"SELECT {columns} FROM interactions AS i JOIN sessions AS s "
            f"ON s.session_id = i.session_id {order}, i.seq"
        )
        groups = itertools.groupby(self.conn.execute(query), key=lambda r: r["session_id"])
        group = next(groups, None)
        for row in self.conn.cursor().execute(f"SELECT * FROM sessions AS s {order}"):
            if group is not None and group[0] == row["session_id"]:
                cache = restore_cache(group[1])  # consumed before the next group is read
                group = next(groups, None)
            else:
                cache = restore_cache(())
            yield StoredSession(row, cache)
