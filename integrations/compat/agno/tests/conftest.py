"""Agno against a real rltap proxy (scripted engine, tiny model), pointed at it only by
`OpenAILike(base_url=..., api_key=...)`; vendor variables removed and `AGNO_TELEMETRY=false`
(`rltap.testing.fixtures`). No agent or team gets a `db`, so no run history is kept between
runs."""

from __future__ import annotations

pytest_plugins = ["rltap.testing.fixtures"]
