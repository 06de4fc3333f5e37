"""`CaptureStore`: the proxy's durable record, written off the event loop.

One writer thread owns the connection and runs jobs in the order they were handed in, each in a
transaction of its own: a session started, an interaction finished (its row built on that
thread), a reward, a session ended or exported. `durable()` waits (without blocking the event
loop) until every job handed in so far is committed; the proxy awaits it before a reply, a
reward's answer or an end's answer goes out, so whatever a client was told happened survives a
SIGKILL of the proxy.

Opening a store recovers it: sessions still `active` there belonged to a proxy that died; they
become `interrupted`, their finished calls exportable (`/export_trajectories`, `rltap export`).
One proxy writes a store at a time: it holds an exclusive lock on `PATH.lock` while it is open
(the kernel drops it when the process dies, SIGKILL included), and a second proxy on the same
store gets `StoreInUse` instead of turning the first one's live sessions into `interrupted`.
Readers (`rltap export`, `inspect`, `view`) take no lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rltap.errors import StoreUnavailable
from rltap.store.retention import Retention, prune
from rltap.store.rows import INSERT_INTERACTION, StoredSession, interaction_row, load_session
from rltap.store.schema import connect
from rltap.types import InteractionWithTokenLogpReward

__all__ = ["CaptureStore", "SessionJournal", "StoreInUse"]

_log = logging.getLogger(__name__)
Job = Callable[[sqlite3.Connection], Any]
_PRUNE_EVERY = 5.0  # seconds between two retention passes


class StoreInUse(RuntimeError):
    """Another process has the store open for writing."""


def _lock(path: Path) -> IO[bytes]:
    handle = path.with_name(path.name + ".lock").open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        msg = f"the capture store {path} is open in another proxy; one proxy writes a store"
        raise StoreInUse(msg) from None
    return handle


class CaptureStore:
    """The SQLite capture store at `path` (created if missing, recovered if not).

    Usage:
        store = CaptureStore(Path("capture.sqlite"))
        cache = InteractionCache(journal=store.journal(session_id))
        ...
        await store.durable()
        store.close()
    """

    def __init__(self, path: Path, retention: Retention | None = None) -> None:
        self.path = Path(path)
        self.retention = retention
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.path)
        conn = connect(self.path, check_same_thread=False)
        with _transaction(conn):
            self.interrupted = conn.execute(  # how many a dead proxy left open
                "UPDATE sessions SET state = 'interrupted' WHERE state = 'active'"
            ).rowcount
        if retention is not None:
            with _transaction(conn):
                prune(conn, retention)
        self._jobs: queue.SimpleQueue[tuple[Job, concurrent.futures.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._last: concurrent.futures.Future[Any] | None = None
        self._pruned_at = time.monotonic()
        # Reads on the proxy's side (a key it does not know), beside the writer's connection.
        self._reader = sqlite3.connect(self.path, check_same_thread=False)
        self._read_lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._write, args=(conn,), name="rltap-capture-store", daemon=True
        )
        self._thread.start()

    def submit(self, job: Job) -> concurrent.futures.Future[Any]:
        """Run `job(connection)` on the writer thread, in a transaction of its own."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((job, future))
        self._last = future
        return future

    def execute(self, sql: str, parameters: tuple[Any, ...]) -> None:
        """One statement on the writer thread, in a transaction of its own."""
        self.submit(lambda conn: conn.execute(sql, parameters))

    async def durable(self) -> None:
        """Wait until every job submitted so far is committed; `StoreUnavailable` (503) if the
        last one failed."""
        last = self._last
        if last is not None and not last.done():
            await asyncio.wrap_future(last)
        elif last is not None:
            last.result()

    def _write(self, conn: sqlite3.Connection) -> None:
        while (item := self._jobs.get()) is not None:
            job, future = item
            try:
                with _transaction(conn):
                    result = job(conn)
            except Exception as exc:  # the awaiting reply reports it; the writer goes on
                _log.exception("capture store write failed")
                error = StoreUnavailable(f"the capture store {self.path} failed to write: {exc}")
                error.__cause__ = exc
                future.set_exception(error)
            else:
                future.set_result(result)
        conn.close()

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self._jobs.put(None)
        self._thread.join()
        self._reader.close()
        self._lock.close()  # the lock goes with its file

    # What the proxy records ---------------------------------------------------------------------
    def journal(self, session_id: str) -> SessionJournal:
        return SessionJournal(self, session_id)

    def set_meta(self, key: str, value: str) -> None:
        """A fact about the recording (e.g. `tokenizer`, the folder that decodes its tokens)."""
        self.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def session_started(self, session_id: str, key_hash: bytes, task_id: str | None) -> None:
        self.execute(
            "INSERT OR REPLACE INTO sessions (session_id, key_hash, task_id, state, started) "
            "VALUES (?, ?, ?, 'active', ?)",
            (session_id, key_hash, task_id, time.time()),
        )

    def session_ended(self, session_id: str, state: str) -> None:
        sql = "UPDATE sessions SET state = ?, ended = ? WHERE session_id = ?"
        self.execute(sql, (state, time.time(), session_id))

    def session_exported(self, session_id: str) -> None:
        sql = "UPDATE sessions SET exported = ? WHERE session_id = ?"
        self.execute(sql, (time.time(), session_id))
        retention = self.retention
        if retention is not None and time.monotonic() - self._pruned_at > _PRUNE_EVERY:
            self._pruned_at = time.monotonic()
            self.submit(lambda conn: prune(conn, retention))

    def session_of_key(self, key_hash: bytes) -> str | None:
        """The stored session whose key has this digest (an indexed read, on the caller's
        thread: only a key the proxy does not know asks it), or None."""
        query = "SELECT session_id FROM sessions WHERE key_hash = ? ORDER BY started DESC"
        with self._read_lock:
            row = self._reader.execute(query, (key_hash,)).fetchone()
        return None if row is None else str(row[0])

    def load(self, session_id: str) -> StoredSession | None:
        """A session as stored (blocking: call it on a thread); None if it is not there."""
        conn = connect(self.path)
        try:
            return load_session(conn, session_id)
        finally:
            conn.close()


class SessionJournal:
    """One session's `rltap.cache.CacheJournal`: its finished calls and rewards to the store."""

    def __init__(self, store: CaptureStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id

    def recorded(self, interaction: InteractionWithTokenLogpReward, order: int) -> None:
        session_id = self.session_id
        self.store.submit(
            lambda c: c.execute(INSERT_INTERACTION, interaction_row(session_id, interaction, order))
        )

    def rewarded(self, interaction_id: str, reward: float) -> None:
        sql = "UPDATE interactions SET reward = ? WHERE interaction_id = ?"
        self.store.execute(sql, (reward, interaction_id))

    async def durable(self) -> None:
        await self.store.durable()


class _transaction:
    """BEGIN ... COMMIT (ROLLBACK on an error) on a connection in autocommit mode."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN")
        return self.conn

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")
