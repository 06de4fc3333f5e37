"""The durable capture store (SQLite) and what reads it: exports to Parquet, JSONL and
safetensors, and the summary `rltap inspect` prints.

`CaptureStore` is what the proxy writes (`rltap serve --store PATH`); the rest read a store, or
a run folder holding one. Names are imported on first use: the proxy loads only the writer, and
pyarrow is imported only by a Parquet export.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltap._lazy import lazy_getattr

if TYPE_CHECKING:
    from rltap.store.capture import CaptureStore, SessionJournal, StoreInUse
    from rltap.store.retention import Retention, parse_retention
    from rltap.store.rows import StoredSession

__all__ = [
    "CaptureStore",
    "Retention",
    "SessionJournal",
    "StoreInUse",
    "StoredSession",
    "parse_retention",
]

_LAZY = {
    "CaptureStore": "rltap.store.capture",
    "Retention": "rltap.store.retention",
    "SessionJournal": "rltap.store.capture",
    "StoreInUse": "rltap.store.capture",
    "StoredSession": "rltap.store.rows",
    "parse_retention": "rltap.store.retention",
}

__getattr__ = lazy_getattr("rltap.store", globals(), _LAZY)
