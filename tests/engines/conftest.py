"""Event loops for the engine tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Tests marked `uvloop_too` run on the standard loop and on uvloop, whose transports are
    not `asyncio.Transport` subclasses; the rest on the standard loop only."""
    if item.get_closest_marker("uvloop_too"):
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
