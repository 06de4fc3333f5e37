"""The capture store's writer process: it commits what the proxy hands it, even once the proxy
is dead.

`rltap.store.capture.CaptureStore` starts it as `python -I writer.py PATH LOCK_WAIT PRAGMA...`
and writes each transaction to its stdin the moment it is known: a little-endian uint32 length,
then the pickle of `(token, statements)`, `statements` a list of `(sql, parameters)`. Bytes in
the pipe are out of the proxy's hands: if the proxy is killed (SIGKILL included), this process
still reads the pipe to its end, commits every transaction in it, and exits. It holds the store's
lock (`PATH.lock`) from start to exit, so a proxy started again on the store recovers it only
once the old writer has finished.

It answers on stdout, a line each:
    ready               it holds the lock and its connection (the first line)
    in-use              another writer held the lock for LOCK_WAIT seconds (the only line)
    done TOKEN          every transaction up to the one of TOKEN is committed
    failed TOKEN ERROR  a transaction failed (TOKEN `-` if it had none); nothing after it is
                        written either, and every later TOKEN is answered `failed` too

It reads in bursts: once the pipe turns readable it waits `BURST` seconds, then takes everything
there. A stream of calls then costs one wake-up of this process per burst instead of one per
call; a wake-up of another core is what the proxy's replies would pay for otherwise. Standard
library only, run in isolated mode: it starts in milliseconds and never imports rltap.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import select
import sqlite3
import struct
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["BURST", "Statements", "frame", "main", "serve", "transaction"]

BURST = 0.05  # seconds between the first byte of a burst and reading it
HEADER = struct.Struct("<I")
Statements = list[tuple[str, tuple[Any, ...]]]


def frame(token: int | None, statements: Statements) -> bytes:
    """One transaction as the proxy writes it to this process."""
    body = pickle.dumps((token, statements), protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def _messages(buffer: bytearray) -> Iterator[tuple[int | None, Statements]]:
    """The complete frames at the start of `buffer`, removed from it."""
    while len(buffer) >= HEADER.size:
        (length,) = HEADER.unpack_from(buffer)
        end = HEADER.size + length
        if len(buffer) < end:
            return
        message = pickle.loads(buffer[HEADER.size : end])
        del buffer[:end]
        yield message


def _lock(path: str, wait: float) -> IO[bytes] | None:
    handle = open(path + ".lock", "ab")  # noqa: SIM115 (held until the process exits)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                return None
            time.sleep(0.02)


def _say(line: str) -> None:
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


def _read_available(fd: int, buffer: bytearray) -> bool:
    """Append what the pipe holds now to `buffer`; False once the proxy closed it."""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        buffer += chunk


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN ... COMMIT (ROLLBACK on an error) on a connection in autocommit mode."""
    conn.execute("BEGIN")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def serve(conn: sqlite3.Connection, fd: int) -> None:
    """Commit every transaction the pipe `fd` brings, in order, until it ends."""
    os.set_blocking(fd, False)
    buffer = bytearray()
    failure: str | None = None
    open_ = True
    while open_:
        select.select([fd], [], [])
        time.sleep(BURST)
        open_ = _read_available(fd, buffer)
        for token, statements in _messages(buffer):
            if failure is None:
                try:
                    with transaction(conn):
                        for sql, parameters in statements:
                            conn.execute(sql, parameters)
                except Exception as exc:  # reported to the proxy, which stops answering
                    failure = f"{type(exc).__name__}: {exc}"
                    _say(f"failed {'-' if token is None else token} {failure}")
                    continue
            if token is not None:
                _say(f"done {token}" if failure is None else f"failed {token} {failure}")


def main(argv: list[str]) -> int:
    path, lock_wait, *pragmas = argv
    lock = _lock(path, float(lock_wait))
    if lock is None:
        _say("in-use")
        return 1
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in pragmas:
        conn.execute(pragma)
    _say("ready")
    serve(conn, sys.stdin.fileno())
    conn.close()
    lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
