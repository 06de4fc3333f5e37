"""The matrix's baseline cells: agents written with the plain openai and anthropic SDKs (their tool
loops, and their `parse` helpers for structured output)."""

from __future__ import annotations

from typing import Any

from rltap.testing.sdk_agents import AnthropicSDKAgent, OpenAISDKAgent
from rltap.testing.structured import AnthropicSDKParseAgent, OpenAISDKParseAgent, forecast_reward
from rltap_dev.matrix import AdapterMatrixTests, final_answer_reward


class TestOpenAISDKMatrix(AdapterMatrixTests):
    framework = "openai-sdk"
    wire_formats = ("chat", "responses")

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> Any:
        return OpenAISDKAgent(wire_format=wire_format, stream=stream, reward_fn=final_answer_reward)

    def make_structured_agent(self, *, stream: bool, wire_format: str) -> Any:
        return OpenAISDKParseAgent(
            wire_format=wire_format, stream=stream, reward_fn=forecast_reward
        )


class TestAnthropicSDKMatrix(AdapterMatrixTests):
    framework = "anthropic-sdk"
    wire_formats = ("messages",)

    def make_agent(self, *, tools: bool, stream: bool, wire_format: str) -> Any:
        return AnthropicSDKAgent(stream=stream, reward_fn=final_answer_reward)

    def make_structured_agent(self, *, stream: bool, wire_format: str) -> Any:
        return AnthropicSDKParseAgent(stream=stream, reward_fn=forecast_reward)
