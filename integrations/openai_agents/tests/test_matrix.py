"""The OpenAI Agents SDK's cells of the integration matrix (`rltap_dev.matrix`).

inline | subproc x stream | no stream x Chat Completions | Responses: the calculator agent (a real
`function_tool`), and an agent with `output_type=Forecast` for the structured-output column, through
`OpenAIProxyWorkflow`, each cell recorded for the table `make test` prints.
"""

from __future__ import annotations

from typing import ClassVar

from oa_agents_for_tests import make_adapter, make_structured_adapter

from rltap_dev.matrix import AdapterMatrixTests
from rltap_openai_agents import OpenAIAgentsAdapter


class TestOpenAIAgentsMatrix(AdapterMatrixTests):
    framework: ClassVar[str] = "openai_agents"
    supports_streaming: ClassVar[bool] = True
    wire_formats: ClassVar[tuple[str, ...]] = ("chat", "responses")

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> OpenAIAgentsAdapter:
        return make_adapter(tools=tools, stream=stream, wire_format=wire_format)

    def make_structured_agent(self, *, stream: bool, wire_format: str) -> OpenAIAgentsAdapter:
        return make_structured_adapter(stream=stream, wire_format=wire_format)
