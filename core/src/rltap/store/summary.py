"""`rltap inspect SOURCE`: what a store holds, as one table per session state and in all."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from rich.table import Table

from rltap.store.read import SessionSummary

__all__ = ["summary_table"]


def _row(name: str, sessions: Sequence[SessionSummary]) -> list[str]:
    rewards = [s.reward for s in sessions]
    versions = [s.max_version for s in sessions if s.max_version >= 0]
    return [
        name,
        f"{len(sessions):,}",
        f"{sum(s.exported for s in sessions):,}",
        f"{sum(s.calls - s.errors for s in sessions):,}",
        f"{sum(s.errors for s in sessions):,}",
        f"{sum(s.prompt_tokens for s in sessions):,}",
        f"{sum(s.generated_tokens for s in sessions):,}",
        f"{statistics.fmean(rewards):.3f}" if rewards else "-",
        f"{statistics.pstdev(rewards):.3f}" if len(rewards) > 1 else "-",
        f"{min(versions)}..{max(versions)}" if versions else "-",
    ]


def summary_table(title: str, sessions: Sequence[SessionSummary]) -> Table:
    """Sessions by state, then all: calls complete and not, tokens, session reward (the sum of
    its calls' own rewards), policy versions."""
    table = Table(title=title)
    columns = ("state", "sessions", "exported", "calls ok", "calls failed", "prompt tokens")
    for column in (*columns, "generated tokens", "reward mean", "reward std", "versions"):
        table.add_column(column, justify="left" if column == "state" else "right")
    states: dict[str, list[SessionSummary]] = {}
    for session in sessions:
        states.setdefault(session.state, []).append(session)
    for state in sorted(states):
        table.add_row(*_row(state, states[state]))
    table.add_row(*_row("all", sessions), style="bold")
    return table
