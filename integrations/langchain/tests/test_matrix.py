"""LangChain's cells of the integration matrix (`rltap.testing.matrix`).

inline | subproc x stream | no stream x Chat Completions | Responses: the `create_agent` tool
agent through `OpenAIProxyWorkflow`, each cell recorded for the table `make test` prints.
"""

from __future__ import annotations

from typing import ClassVar

from lc_builders import make_adapter

from rltap.testing.matrix import AdapterMatrixTests
from rltap_langchain import LangChainAdapter


class TestLangChainMatrix(AdapterMatrixTests):
    framework: ClassVar[str] = "langchain"
    supports_streaming: ClassVar[bool] = True
    wire_formats: ClassVar[tuple[str, ...]] = ("chat", "responses")

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> LangChainAdapter:
        return make_adapter(tools=tools, stream=stream, wire_format=wire_format)
