"""`--store-retention`: how long, or how many, exported sessions the capture store keeps.

`7d`, `12h`, `30m`, `90s`: exported sessions older than that (since their export) are pruned;
a bare number, `1000`: the newest 1000 exported sessions are kept. Sessions not yet exported
are never pruned.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Retention", "parse_retention", "prune", "prune_statements"]

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True, slots=True)
class Retention:
    """Keep exported sessions for `max_age` seconds, or the newest `max_count` of them."""

    max_age: float | None = None
    max_count: int | None = None


def parse_retention(text: str) -> Retention:
    """`Retention` from `--store-retention`'s text (ValueError naming the forms it takes)."""
    spec = text.strip().lower()
    try:
        if spec and spec[-1] in _UNITS:
            age = float(spec[:-1]) * _UNITS[spec[-1]]
            if age > 0:
                return Retention(max_age=age)
        elif int(spec) >= 0:
            return Retention(max_count=int(spec))
    except ValueError:
        pass
    msg = f"--store-retention takes an age (7d, 12h, 30m, 90s) or a count (1000), got {text!r}"
    raise ValueError(msg)


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
