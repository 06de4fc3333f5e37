"""The capture store's tables, and how a connection to it is opened.

One row per session (its key only as the proxy's BLAKE2b digest) and one per finished
interaction: its place in the tree (`seq`, the cache's insertion order; `parent_id`, `link`),
its status, reward, messages (JSON) and tokens (`rltap.store.codec` blobs). The covering index
on `(session_id, ...)` answers the viewer's session list without reading a blob.

A column added since schema 1 (`ADDED_COLUMNS`: `policy`, the call's policy in a run of several)
is added to an older store by the first writer that opens it; a reader of a store without it
reads NULL (`rltap.store.rows.selected_columns`).

WAL with `synchronous=NORMAL`: a committed transaction survives the process being killed
(SIGKILL included); the last transactions before a power loss may not.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = [
    "ADDED_COLUMNS",
    "PRAGMAS",
    "READ_PRAGMAS",
    "SCHEMA_VERSION",
    "STORE_FILE",
    "connect",
    "interaction_columns",
]

SCHEMA_VERSION = 1
# The store's name in a run folder (`rltap rollout --out`, `rltap train --out`).
STORE_FILE = "capture.sqlite"
# Every connection's settings, the writer process's included (`rltap.store.writer`).
READ_PRAGMAS = ("PRAGMA busy_timeout=10000",)  # a reader's: it changes nothing in the file
PRAGMAS = (*READ_PRAGMAS, "PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL")
# The interactions' columns added since schema 1 (all nullable), with their types.
ADDED_COLUMNS = (("policy", "TEXT"),)

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    key_hash BLOB,
    task_id TEXT,
    state TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    exported REAL
);
CREATE INDEX IF NOT EXISTS sessions_by_export ON sessions (exported);
CREATE INDEX IF NOT EXISTS sessions_by_key ON sessions (key_hash);
CREATE TABLE IF NOT EXISTS interactions (
    interaction_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    parent_id TEXT,
    link TEXT,
    agent_id TEXT,
    status TEXT NOT NULL,
    error TEXT,
    reward REAL,
    created REAL NOT NULL,
    input_len INTEGER NOT NULL,
    output_len INTEGER NOT NULL,
    max_version INTEGER NOT NULL,
    latency REAL NOT NULL,
    stop_reason TEXT,
    logprob_convention TEXT,
    constrained INTEGER NOT NULL,
    chat_template TEXT NOT NULL,
    instruction_messages INTEGER NOT NULL,
    messages TEXT NOT NULL,
    output_messages TEXT,
    tools TEXT,
    input_ids BLOB,
    output_ids BLOB,
    logprobs BLOB,
    versions BLOB,
    policy TEXT
);
CREATE INDEX IF NOT EXISTS interactions_by_session
    ON interactions (session_id, seq, status, reward, input_len, output_len, max_version);
"""


def connect(
    path: Path, *, check_same_thread: bool = True, create: bool = True
) -> sqlite3.Connection:
    """A connection to the store at `path`, its tables created if missing; with `create`
    False (a reader) nothing is written, and a file that is no capture store is a ValueError
    naming it."""
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    # isolation_level None: transactions are the explicit BEGIN/COMMIT of the writer.
    conn = sqlite3.connect(path, check_same_thread=check_same_thread, isolation_level=None)
    for pragma in PRAGMAS if create else READ_PRAGMAS:
        conn.execute(pragma)
    if create:
        conn.executescript(_TABLES)
        present = interaction_columns(conn)
        for name, kind in ADDED_COLUMNS:
            if name not in present:  # a store written before the column existed
                conn.execute(f"ALTER TABLE interactions ADD COLUMN {name} {kind}")
    try:
        found = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.DatabaseError:  # no meta table, or no SQLite file at all
        found = None
    if found is None and not create:
        conn.close()
        raise ValueError(f"{path} is not an rltap capture store")
    if found is None:
        conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    elif int(found[0]) != SCHEMA_VERSION:
        conn.close()
        msg = f"{path} is a capture store of schema {found[0]}; this rltap reads {SCHEMA_VERSION}"
        raise ValueError(msg)
    return conn


def interaction_columns(conn: sqlite3.Connection) -> set[str]:
    """The columns the store's interactions table has."""
    return {str(row[1]) for row in conn.execute("PRAGMA table_info(interactions)")}
