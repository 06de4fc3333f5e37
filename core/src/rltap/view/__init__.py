"""The trajectory viewer: a local page over capture stores (`rltap view SOURCE`), served by
FastAPI like the proxy; plain HTML, CSS and JavaScript in `static/`, no build step, no CDN."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltap._lazy import lazy_getattr

if TYPE_CHECKING:
    from rltap.view.app import create_view_app
    from rltap.view.runs import Run, find_runs

__all__ = ["Run", "create_view_app", "find_runs"]

_LAZY = {
    "Run": "rltap.view.runs",
    "create_view_app": "rltap.view.app",
    "find_runs": "rltap.view.runs",
}

__getattr__ = lazy_getattr("rltap.view", globals(), _LAZY)
