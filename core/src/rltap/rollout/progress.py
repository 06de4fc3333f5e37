"""The live display of long commands (`rltap rollout`, `rltap train`): one bar per task, with
its label, count, live counters (a `live` field) and elapsed time."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["progress_display"]


def progress_display(console: Console) -> Progress:
    """A rich `Progress` whose tasks take a `live` field (`add_task(..., live="...")`)."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[live]}"),
        TimeElapsedColumn(),
    )
    return Progress(*columns, console=console, transient=False)
