"""rltap's standard adapter suite (`rltap.testing.adapter_suite`) for LangChainAdapter."""

from __future__ import annotations

from typing import ClassVar

from lc_builders import make_adapter

from rltap.testing.adapter_suite import AdapterStandardTests
from rltap_langchain import LangChainAdapter


class TestLangChainStandard(AdapterStandardTests):
    supports_streaming: ClassVar[bool] = True
    supports_tool_calls: ClassVar[bool] = True
    wire_formats: ClassVar[tuple[str, ...]] = ("chat", "responses")

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> LangChainAdapter:
        return make_adapter(tools=tools, stream=stream, wire_format=wire_format)
