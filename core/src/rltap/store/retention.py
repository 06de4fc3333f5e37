"""`--store-retention`: how long, or how many, exported sessions the capture store keeps.

`7d`, `12h`, `30m`, `90s`: exported sessions older than that (since their export) are pruned;
a bare number, `1000`: the newest 1000 exported sessions are kept. Sessions not yet exported
are never pruned. `Retention` and its parser are declared with the flag (`rltap.config.serve`).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from rltap.config.serve import Retention, parse_retention

__all__ = ["Retention", "parse_retention", "prune", "prune_statements"]


def prune_statements(
    retention: Retention, now: float | None = None
) -> list[tuple[str, tuple[Any, ...]]]:
    """The deletes (one transaction) of the exported sessions `retention` lets go, with their
    interactions: the writer process runs them after an export."""
    if retention.max_age is not None:
        doomed = "SELECT session_id FROM sessions WHERE exported IS NOT NULL AND exported < ?"
        bound: float | int = (time.time() if now is None else now) - retention.max_age
    else:
        doomed = (
            "SELECT session_id FROM sessions WHERE exported IS NOT NULL "
            "ORDER BY exported DESC LIMIT -1 OFFSET ?"
        )
        bound = retention.max_count or 0
    return [
        (f"DELETE FROM interactions WHERE session_id IN ({doomed})", (bound,)),
        (f"DELETE FROM sessions WHERE session_id IN ({doomed})", (bound,)),
    ]


def prune(conn: sqlite3.Connection, retention: Retention, now: float | None = None) -> int:
    """Run `prune_statements` on `conn`; how many sessions went."""
    pruned = 0
    for sql, parameters in prune_statements(retention, now):
        pruned = conn.execute(sql, parameters).rowcount
    return pruned
