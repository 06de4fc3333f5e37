"""`CaptureStore`: the proxy's durable record, written by a process of its own.

Every job (a session started, an interaction finished, a reward, a session ended or exported) is
one transaction, handed as bytes to the writer process (`rltap.store.writer`) through a pipe the
moment it happens; the process commits them in order, off the proxy's event loop and its GIL.
`durable()` waits (without blocking the event loop) until every job handed in so far is in the
pipe: the proxy awaits it before a reply, a reward's answer or an end's answer goes out. From
there the kernel holds the bytes and the writer commits them even if the proxy is killed
(SIGKILL included), so whatever a client was told happened survives. Waiting for the commit
itself would cost each reply a round trip to another core; the pipe costs a write.

A write that fails (disk full, a broken file) stops the store: the writer writes nothing after it
and tells the proxy, whose replies from then on are 503 `store_unavailable` (`StoreUnavailable`);
the calls answered in the moment before it heard (the writer's `BURST`) are in memory only.

Opening a store recovers it: sessions still `active` there belonged to a proxy that died; they
become `interrupted`, their finished calls exportable (`/export_trajectories`, `rltap export`).
One proxy writes a store at a time: its writer holds an exclusive lock on `PATH.lock` until it
has committed everything (the kernel drops it when the process ends), and a second proxy on the
same store gets `StoreInUse` instead of turning the first one's live sessions into `interrupted`.
Readers (`rltap export`, `inspect`, `view`) take no lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import itertools
import logging
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rltap.record.errors import RltapError, StoreUnavailable
from rltap.record.types import InteractionWithTokenLogpReward
from rltap.store import writer
from rltap.store.retention import Retention, prune, prune_statements
from rltap.store.rows import INSERT_INTERACTION, StoredSession, interaction_row, load_session
from rltap.store.schema import PRAGMAS, connect

__all__ = ["CaptureStore", "SessionJournal", "StoreInUse"]

_log = logging.getLogger(__name__)
_PRUNE_EVERY = 5.0  # seconds between two retention passes
_PIPE_SIZE = 1 << 20  # room for the writer's bursts (Linux's default limit for a pipe)


class StoreInUse(RltapError, RuntimeError):
    """Another process has the store open for writing (`rltap serve --store`: a usage error)."""


class CaptureStore:
    """The SQLite capture store at `path` (created if missing, recovered if not).

    `lock_wait`: how long to wait for the store's lock, held by an earlier writer that is still
    committing what its proxy left (a proxy restarted at once after a kill).

    Usage:
        store = CaptureStore(Path("capture.sqlite"))
        cache = InteractionCache(journal=store.journal(session_id))
        ...
        await store.durable()
        store.close()
    """

    def __init__(
        self, path: Path, retention: Retention | None = None, lock_wait: float = 10.0
    ) -> None:
        self.path = Path(path)
        self.retention = retention
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._process = _start_writer(self.path, lock_wait)
        try:
            self.interrupted = _recover(self.path, retention)  # how many a dead proxy left open
        except BaseException:
            self._stop_writer()
            raise
        assert self._process.stdin is not None
        self._fd = self._process.stdin.fileno()
        os.set_blocking(self._fd, False)
        self._pending = bytearray()  # what the pipe had no room for yet, in order
        self._send_lock = threading.Lock()
        self._tokens = itertools.count()
        self._waiting: dict[int, concurrent.futures.Future[None]] = {}  # flushes, by token
        self._waiting_lock = threading.Lock()
        self._answering = True  # until the writer's stdout ends
        self._failure: str | None = None  # why the store stopped (a fresh error each time)
        self._closing = False
        self._pruned_at = time.monotonic()
        self._listener = threading.Thread(
            target=self._listen, name="rltap-capture-store", daemon=True
        )
        self._listener.start()
        # Reads on the proxy's side (a key it does not know).
        self._reader = connect(self.path, check_same_thread=False)
        self._read_lock = threading.Lock()

    # Handing jobs to the writer -----------------------------------------------------------------
    def submit(self, statements: writer.Statements) -> None:
        """Hand one transaction to the writer; never blocks (what the pipe has no room for waits
        in memory until `durable()` or `flush()` sends it)."""
        self._send(writer.frame(None, statements))

    def execute(self, sql: str, parameters: tuple[Any, ...]) -> None:
        """One statement, in a transaction of its own."""
        self.submit([(sql, parameters)])

    async def durable(self) -> None:
        """Wait until every job submitted so far is in the writer's hands; `StoreUnavailable`
        (503) once the store failed."""
        if self._pending:
            await asyncio.to_thread(self._send_pending)
        if self._failure is not None:
            raise StoreUnavailable(self._failure)

    def flush(self) -> None:
        """Block until every job submitted so far is committed (readers see it)."""
        token = next(self._tokens)
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._waiting_lock:
            if not self._answering:
                raise StoreUnavailable(self._failure or f"the capture store {self.path} closed")
            self._waiting[token] = done
        self._send(writer.frame(token, []))
        self._send_pending()
        done.result()

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            if self._pending:
                self._pending += data
                return
            written = self._write(data)
            if written < len(data):
                self._pending += data[written:]

    def _write(self, data: bytes | bytearray) -> int:
        """Write what the pipe takes of `data` (with the send lock held); how many bytes."""
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:  # the writer is gone: nothing more can be stored
            self._fail(f"the capture store's writer process stopped taking writes: {exc}")
            return len(data)

    def _send_pending(self) -> None:
        """Block (off the event loop) until the pipe took everything pending."""
        while True:
            with self._send_lock:
                if self._pending:
                    del self._pending[: self._write(self._pending)]
                if not self._pending:
                    return
            select.select([], [self._fd], [], 1.0)

    @property
    def failure(self) -> str | None:
        """Why the store stopped writing (its calls are 503 from then on), or None."""
        return self._failure

    # What the writer answers --------------------------------------------------------------------
    def _listen(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            kind, token, *error = line.decode().rstrip("\n").split(" ", 2)
            if kind == "failed":
                self._fail(f"the capture store {self.path} failed to write: {' '.join(error)}")
            if token.isdigit():
                with self._waiting_lock:
                    waiter = self._waiting.pop(int(token))
                if self._failure is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(StoreUnavailable(self._failure))
        if not self._closing:
            self._fail(f"the capture store's writer process exited ({self._process.wait()})")
        with self._waiting_lock:
            self._answering = False
            waiters, self._waiting = list(self._waiting.values()), {}
        for waiter in waiters:
            waiter.set_exception(StoreUnavailable(self._failure or f"{self.path} closed"))

    def _fail(self, message: str) -> None:
        if self._failure is None:
            _log.error("%s; later calls are refused (503 store_unavailable)", message)
            self._failure = message

    def close(self) -> None:
        """Hand over what is pending, then wait until the writer committed everything."""
        self._send_pending()
        self._closing = True
        self._stop_writer()
        self._listener.join()
        self._reader.close()

    def _stop_writer(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()  # its end of the pipe: the writer commits the rest, exits
        self._process.wait()

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
            self.submit(prune_statements(retention))

    def session_of_key(self, key_hash: bytes) -> str | None:
        """The stored session whose key has this digest (an indexed read, on the caller's
        thread: only a key the proxy does not know asks it), or None. It reads what is
        committed: a session of this proxy's is there a `writer.BURST` after it started."""
        query = "SELECT session_id FROM sessions WHERE key_hash = ? ORDER BY started DESC"
        with self._read_lock:
            row = self._reader.execute(query, (key_hash,)).fetchone()
        return None if row is None else str(row[0])

    def load(self, session_id: str) -> StoredSession | None:
        """A session as stored, every job handed in before included (blocking: call it on a
        thread); None if it is not there."""
        self.flush()
        conn = connect(self.path)  # its own: a long restore must not hold up `session_of_key`
        try:
            return load_session(conn, session_id)
        finally:
            conn.close()


class SessionJournal:
    """One session's `rltap.tree.CacheJournal`: its finished calls and rewards to the store."""

    def __init__(self, store: CaptureStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id

    def recorded(self, interaction: InteractionWithTokenLogpReward, order: int) -> None:
        row = interaction_row(self.session_id, interaction, order)
        self.store.execute(INSERT_INTERACTION, row)

    def rewarded(self, interaction_id: str, reward: float) -> None:
        sql = "UPDATE interactions SET reward = ? WHERE interaction_id = ?"
        self.store.execute(sql, (reward, interaction_id))

    async def durable(self) -> None:
        await self.store.durable()


def _start_writer(path: Path, lock_wait: float) -> subprocess.Popen[bytes]:
    """The writer process of `path`, once it holds the store's lock (`StoreInUse` if not)."""
    command = [sys.executable, "-I", writer.__file__, str(path), str(lock_wait), *PRAGMAS]
    # A session of its own: a Ctrl-C meant for the proxy must not cut the writer's last commits.
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    assert process.stdin is not None
    assert process.stdout is not None
    # A lower system limit keeps the default pipe: more of a burst then waits in memory.
    with contextlib.suppress(OSError):
        fcntl.fcntl(process.stdin.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    if (first := process.stdout.readline()) != b"ready\n":
        process.stdin.close()
        process.wait()
        if first == b"in-use\n":
            msg = f"the capture store {path} is open in another proxy; one proxy writes a store"
            raise StoreInUse(msg)
        msg = f"the capture store's writer process did not start on {path} ({process.returncode})"
        raise StoreUnavailable(msg)
    return process


def _recover(path: Path, retention: Retention | None) -> int:
    """Open `path` (its tables created if missing), turn the sessions a dead proxy left
    `active` into `interrupted`, prune by `retention`; how many were interrupted."""
    conn = connect(path)
    try:
        with writer.transaction(conn):
            interrupted = conn.execute(
                "UPDATE sessions SET state = 'interrupted' WHERE state = 'active'"
            ).rowcount
        if retention is not None:
            with writer.transaction(conn):
                prune(conn, retention)
        return int(interrupted)
    finally:
        conn.close()
