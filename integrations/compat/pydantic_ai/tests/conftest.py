"""Pydantic AI against a real rltap proxy (scripted engine, tiny model), pointed at it only by the
OpenAI provider's `base_url` and `api_key`; vendor variables removed, telemetry off
(`rltap.testing.fixtures`). Pydantic AI sends no traces unless logfire is configured, and
`pydantic-ai-slim` does not install it."""

from __future__ import annotations

pytest_plugins = ["rltap.testing.fixtures"]
