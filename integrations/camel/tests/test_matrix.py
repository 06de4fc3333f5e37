"""CAMEL's cells of the integration matrix (`rltap_dev.matrix`): inline and subprocess,
streamed and not, Chat Completions (CAMEL's OpenAI-compatible backend speaks nothing else); the
structured-output column runs `ChatAgent.step(..., response_format=Forecast)`."""

from __future__ import annotations

from typing import Any

from camel_episodes import chat_step, forecast_step

from rltap.testing.structured import forecast_reward
from rltap_camel import CamelAdapter
from rltap_dev.matrix import AdapterMatrixTests, final_answer_reward


class TestCamelMatrix(AdapterMatrixTests):
    framework = "camel"
    supports_streaming = True
    wire_formats = ("chat",)

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> Any:
        # ChatAgent.step with a tool, the common CAMEL agent; astep is in the standard suite.
        return CamelAdapter(chat_step, reward_fn=final_answer_reward, stream=stream)

    def make_structured_agent(self, *, stream: bool, wire_format: str) -> Any:
        return CamelAdapter(forecast_step, reward_fn=forecast_reward, stream=stream)
