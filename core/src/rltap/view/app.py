"""The viewer as an ASGI app (FastAPI, as the proxy): one page and the JSON it reads.

`GET /` is the page (`static/index.html`, its script and style inline-free but local: no CDN,
no build step, nothing fetched from outside). The JSON routes, all read-only:

- `GET /api/runs`: the runs under SOURCE (`rltap.view.runs`), each with its reward histogram
  and, for a training run, its reward per step;
- `GET /api/runs/{run}/sessions?sort=&desc=&state=&q=&errors=&limit=&offset=`: the session list;
- `GET /api/runs/{run}/sessions/{session_id}?discount=`: the session's tree;
- `GET /api/runs/{run}/interactions/{interaction_id}`: messages, reply, tokens.

Errors are the proxy's (`rltap.proxy.errors`): `{"error": {"message", "type", "param", "code"}}`
with the error's status (404 for an unknown run, session, interaction, file or route; 400 for a
bad parameter: a sort, a discount, a limit; 500, logged, for anything unexpected).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query
from fastapi.responses import FileResponse

from rltap.proxy import install_error_handlers
from rltap.record.errors import NotFound
from rltap.store.read import StoreReader
from rltap.view import data
from rltap.view.runs import Run, find_runs

__all__ = ["create_view_app"]

_STATIC = Path(__file__).parent / "static"


def _decoder(store: Path, tokenizer: Path | None) -> Callable[[int], str] | None:
    """Token id -> text with the tokenizer the proxy recorded with (or `tokenizer`)."""
    if tokenizer is None:
        with StoreReader(store) as reader:
            recorded = reader.meta("tokenizer")
        if recorded is None or not Path(recorded).is_dir():
            return None
        tokenizer = Path(recorded)
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(tokenizer))
    return lambda token: str(loaded.decode([token]))


class _Runs:
    """The runs under SOURCE by name, each read through a connection of its own per request."""

    def __init__(self, source: Path, tokenizer: Path | None) -> None:
        self.source = source
        self.by_name = {run.name: run for run in find_runs(source)}
        for run in self.by_name.values():  # each a capture store (ValueError naming one not)
            StoreReader(run.store).close()
        self.tokenizer = tokenizer
        self._decoders: dict[str, Callable[[int], str] | None] = {}

    def reading(self, name: str) -> StoreReader:
        run = self.by_name.get(name)
        if run is None:
            msg = f"no run {name!r} under {self.source}"
            raise NotFound(msg, param="run")
        return StoreReader(run.store)

    def decoder(self, name: str) -> Callable[[int], str] | None:
        if name not in self._decoders:
            self._decoders[name] = _decoder(self.by_name[name].store, self.tokenizer)
        return self._decoders[name]


def create_view_app(source: Path, tokenizer: Path | None = None) -> FastAPI:
    """The viewer of every run under `source` (a store, a run folder or a folder of runs)."""
    runs = _Runs(source, tokenizer)
    app = FastAPI(title="rltap viewer", version="0.1.0")
    install_error_handlers(app)

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(_STATIC / "index.html")

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> FileResponse:
        if name not in ("viewer.js", "viewer.css"):
            raise NotFound(f"no file {name!r}")
        return FileResponse(_STATIC / name)

    @app.get("/api/runs")
    def list_runs() -> dict[str, Any]:
        return {"runs": [_run_entry(run) for run in runs.by_name.values()]}

    _add_run_routes(app, runs)
    return app


def _add_run_routes(app: FastAPI, runs: _Runs) -> None:
    @app.get("/api/runs/{run}/sessions")
    def sessions(
        run: str,
        sort: str = "started",
        desc: bool = False,
        state: str | None = None,
        q: str | None = None,
        errors: bool = False,
        limit: int = Query(200, ge=1, le=1000),
        offset: int = Query(0, ge=0),
    ) -> dict[str, Any]:
        with runs.reading(run) as reader:
            return data.session_list(
                reader, sort=sort, descending=desc, state=state, query=q,
                errors_only=errors, limit=limit, offset=offset,
            )  # fmt: skip

    @app.get("/api/runs/{run}/sessions/{session_id}")
    def session(run: str, session_id: str, discount: float = 1.0) -> dict[str, Any]:
        with runs.reading(run) as reader:
            return data.session_tree(reader, session_id, discount)

    @app.get("/api/runs/{run}/interactions/{interaction_id}")
    def interaction(run: str, interaction_id: str) -> dict[str, Any]:
        with runs.reading(run) as reader:
            return data.interaction_detail(reader, interaction_id, runs.decoder(run))


def _run_entry(run: Run) -> dict[str, Any]:
    with StoreReader(run.store) as reader:
        histogram, sessions = data.reward_histogram(reader), reader.session_count()
    return {"name": run.name, "sessions": sessions, "histogram": histogram, "steps": run.steps()}
