"""rltap's standard adapter suite for CAMEL (`rltap.testing.adapter_suite`)."""

from __future__ import annotations

from typing import Any

from camel_episodes import ask, chat_astep

from rltap.testing.adapter_suite import AdapterStandardTests
from rltap_camel import CamelAdapter


class TestCamelStandard(AdapterStandardTests):
    supports_streaming = True
    supports_tool_calls = True
    wire_formats = ("chat",)

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> Any:
        # Async episodes: the suite checks that calls go through the injected httpx.AsyncClient,
        # which serves CAMEL's async side (astep); a sync step uses a client of its own.
        return CamelAdapter(chat_astep if tools else ask, stream=stream)
