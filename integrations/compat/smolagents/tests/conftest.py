"""smolagents against a real rltap proxy (scripted engine, tiny model), pointed at it only by
`OpenAIServerModel(api_base=..., api_key=...)`."""

from __future__ import annotations

pytest_plugins = ["rltap.testing.fixtures"]
