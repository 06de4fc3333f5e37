"""rltap's standard adapter suite (`rltap.testing.adapter_suite`) for OpenAIAgentsAdapter."""

from __future__ import annotations

from typing import ClassVar

from oa_agents_for_tests import make_adapter

from rltap.testing.adapter_suite import AdapterStandardTests
from rltap_openai_agents import OpenAIAgentsAdapter


class TestOpenAIAgentsStandard(AdapterStandardTests):
    supports_streaming: ClassVar[bool] = True
    supports_tool_calls: ClassVar[bool] = True
    wire_formats: ClassVar[tuple[str, ...]] = ("chat", "responses")

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> OpenAIAgentsAdapter:
        return make_adapter(tools=tools, stream=stream, wire_format=wire_format)
