"""LangChain's cells of the integration matrix (`rltap_dev.matrix`).

inline | subproc x stream | no stream x Chat Completions | Responses: the `create_agent` tool
agent, and `create_agent(response_format=Forecast)` for the structured-output column, through
`OpenAIProxyWorkflow`, each cell recorded for the table `make test` prints.
"""

from __future__ import annotations

from typing import ClassVar

from lc_builders import make_adapter, make_structured_adapter

from rltap_dev.matrix import AdapterMatrixTests
from rltap_langchain import LangChainAdapter


class TestLangChainMatrix(AdapterMatrixTests):
    framework: ClassVar[str] = "langchain"
    supports_streaming: ClassVar[bool] = True
    wire_formats: ClassVar[tuple[str, ...]] = ("chat", "responses")

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> LangChainAdapter:
        return make_adapter(tools=tools, stream=stream, wire_format=wire_format)

    def make_structured_agent(self, *, stream: bool, wire_format: str) -> LangChainAdapter:
        return make_structured_adapter(stream=stream, wire_format=wire_format)
